package upstream

import (
	"testing"

	"github.com/easelhq/easel/pkg/luascript/scripttest"
)

// The Go ↔ Lua contract of the breaker's script: its keys, arguments,
// codes and reply, and every name it quotes one Go declares.
func TestScriptContracts(t *testing.T) {
	t.Parallel()
	allowed := map[string]string{fCalls: "a minute's field", fTotalPrefix: "a total's field prefix"}
	for _, f := range breakerFields {
		allowed[f] = "a breaker's field"
	}
	for _, s := range []State{Closed, Open, HalfOpen} {
		allowed[string(s)] = "a state"
	}
	for _, o := range []Outcome{Success, Failure, Throttled, Refused, Final} {
		allowed[string(o)] = "an outcome"
	}
	allowed[opAllow], allowed[opGiveBack] = "an operation", "an operation"
	// A field not set yet reads 0; no error to keep is .
	allowed["0"], allowed[""] = "a number's default", "none"
	scripttest.Check(t, scripts, scripttest.Names{
		Allowed:  allowed,
		Commands: []string{"GET", "HINCRBY", "HMGET", "HSET", "LPUSH", "LTRIM", "PEXPIRE", "SET", "TIME"},
	})
}
