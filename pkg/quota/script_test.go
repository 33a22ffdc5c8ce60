package quota

import (
	"testing"

	"github.com/easelhq/easel/pkg/luascript/scripttest"
)

// The Go ↔ Lua contract of the quota's scripts.
func TestScriptContracts(t *testing.T) {
	t.Parallel()
	scripttest.Check(t, scripts, scripttest.Names{
		Allowed:  map[string]string{"-inf": "a token", "PX": "a token"},
		Commands: []string{"PEXPIRE", "PTTL", "SET", "TIME", "ZADD", "ZCARD", "ZREMRANGEBYSCORE", "ZSCORE"},
	})
}
