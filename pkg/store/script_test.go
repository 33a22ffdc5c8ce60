package store

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/webhook"
)

// The Go ↔ Lua contract of every script, checked without Redis: a change
// on one side that the other does not follow fails here.

type lister interface{ list() []string }
type argLister interface{ list() []any }

// scriptContracts are every script with its Go keys and arguments.
var scriptContracts = []struct {
	script *luaScript
	keys   lister
	args   argLister // nil: variadic (update_account's field list)
}{
	{createLua, createKeys{}, createArgs{}},
	{startLua, taskKeys{}, startArgs{}},
	{releaseLua, releaseKeys{}, releaseArgs{}},
	{progressLua, progressKeys{}, progressArgs{}},
	{completeLua, taskKeys{}, completeArgs{}},
	{failLua, taskKeys{}, failArgs{}},
	{cancelLua, taskKeys{}, cancelArgs{}},
	{abortLua, abortKeys{}, abortArgs{}},
	{takeoverLua, taskKeys{}, takeoverArgs{}},
	{idempotencyDoneLua, idemKeys{}, idemDoneArgs{}},
	{dequeuedLua, queueKeys{}, dequeuedArgs{}},
	{joinQueueLua, queueKeys{}, joinQueueArgs{}},
	{addCreditsLua, creditKeys{}, addCreditsArgs{}},
	{updateAccountLua, accountKeys{}, nil},
	{claimKeyLua, keyKeys{}, claimKeyArgs{}},
	{revokeKeyLua, keyKeys{}, revokeKeyArgs{}},
	{webhookSecretLua, secretKeys{}, webhookSecretArgs{}},
	{rotateSecretLua, secretKeys{}, rotateSecretArgs{}},
	{hookQueuedLua, hookQueuedKeys{}, hookQueuedArgs{}},
	{hookAttemptLua, hookLogKeys{}, hookAttemptArgs{}},
	{dueLua, dueKeys{}, dueArgs{}},
	{queueSeqLua, queueSeqKeys{}, queueSeqArgs{}},
	{leaseLua, leaseKeys{}, leaseArgs{}},
	{unleaseLua, leaseKeys{}, unleaseArgs{}},
}

// Every file under lua/ is a script with a contract (or the library).
func TestEveryScriptHasAContract(t *testing.T) {
	entries, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	var known []string
	for _, c := range scriptContracts {
		known = append(known, c.script.name+".lua")
	}
	for _, e := range entries {
		if e.Name() != "lib.lua" && !slices.Contains(known, e.Name()) {
			t.Errorf("lua/%s has no contract in scriptContracts", e.Name())
		}
	}
}

func TestScriptHeadersMatchGo(t *testing.T) {
	for _, c := range scriptContracts {
		t.Run(c.script.name, func(t *testing.T) {
			if got := luaTags(c.keys); !slices.Equal(got, c.script.keys) {
				t.Errorf("KEYS: the header names %v, Go %T %v", c.script.keys, c.keys, got)
			}
			checkListOrder(t, c.keys, func(v any) []any {
				var out []any
				for _, s := range v.(lister).list() {
					out = append(out, s)
				}
				return out
			})
			if c.args == nil {
				return
			}
			if got := luaTags(c.args); !slices.Equal(got, c.script.argv) {
				t.Errorf("ARGV: the header names %v, Go %T %v", c.script.argv, c.args, got)
			}
			checkListOrder(t, c.args, func(v any) []any { return v.(argLister).list() })
		})
	}
}

// luaTags are the `lua` tags of a struct's fields, in order.
func luaTags(v any) []string {
	rt := reflect.TypeOf(v)
	var out []string
	for i := range rt.NumField() {
		out = append(out, rt.Field(i).Tag.Get("lua"))
	}
	return out
}

// checkListOrder gives every field of v a value of its own and checks
// that list puts field i at position i.
func checkListOrder(t *testing.T, v any, list func(any) []any) {
	t.Helper()
	rv := reflect.New(reflect.TypeOf(v)).Elem()
	want := make([]any, rv.NumField())
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("v%d", i))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Slice:
			f.SetBytes([]byte(fmt.Sprintf("b%d", i)))
		default:
			t.Fatalf("%T.%s: a %s; give it a sentinel here", v, rv.Type().Field(i).Name, f.Kind())
		}
		want[i] = fmt.Sprint(f.Interface())
	}
	got := list(rv.Interface())
	if len(got) != len(want) {
		t.Fatalf("%T.list() has %d elements, the struct %d fields", v, len(got), len(want))
	}
	for i := range got {
		if g := fmt.Sprint(got[i]); g != want[i] {
			t.Errorf("%T.list()[%d] = %s: want field %s (%s)", v, i, g, rv.Type().Field(i).Name, want[i])
		}
	}
}

var (
	luaConstLine = regexp.MustCompile(`(?m)^local ([A-Z_]+(?:, [A-Z_]+)*) = (-?\d+(?:, -?\d+)*)$`)
	luaReturn    = regexp.MustCompile(`(?:return|local reply =) \{?\s*([A-Z_]+|-?\d+)`)
	luaQuoted    = regexp.MustCompile(`'((?:[^'\\]|\\.)*)'`)
	luaCall      = regexp.MustCompile(`redis\.call\('([A-Z]+)'`)
)

// luaConsts are the code constants a Lua text binds: NAME = value.
func luaConsts(t *testing.T, src string) map[string]int64 {
	out := map[string]int64{}
	for _, m := range luaConstLine.FindAllStringSubmatch(src, -1) {
		names, values := strings.Split(m[1], ", "), strings.Split(m[2], ", ")
		if len(names) != len(values) {
			t.Fatalf("lua: %q binds %d names to %d values", m[0], len(names), len(values))
		}
		for i, n := range names {
			v, _ := strconv.ParseInt(values[i], 10, 64)
			out[n] = v
		}
	}
	return out
}

func TestScriptCodesMatchGo(t *testing.T) {
	lib, err := luaFiles.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	libConsts := luaConsts(t, string(lib))
	// lib.lua's outcomes are task.Outcome's values.
	for name, o := range map[string]task.Outcome{"APPLIED": task.Applied, "FINAL": task.AlreadyFinal, "MISSING": task.Missing,
		"SUPERSEDED": task.Superseded, "POISONED": task.Poisoned, "BUSY": task.Busy} {
		if v, ok := libConsts[name]; !ok || v != int64(o) || outcomeCodes[name] != int64(o) {
			t.Errorf("outcome %s: lib.lua %d (bound %v), outcomeCodes %d, task.Outcome %d", name, v, ok, outcomeCodes[name], o)
		}
	}
	for _, c := range scriptContracts {
		t.Run(c.script.name, func(t *testing.T) {
			consts := luaConsts(t, c.script.body)
			for n, v := range libConsts {
				if _, own := consts[n]; !own {
					consts[n] = v
				}
			}
			returned := map[string]bool{}
			for _, m := range luaReturn.FindAllStringSubmatch(c.script.body, -1) {
				name := m[1]
				if _, err := strconv.Atoi(name); err == nil {
					t.Errorf("returns the bare number %s: name it (local NAME = %s) and declare it in Go", name, name)
					continue
				}
				returned[name] = true
				v, bound := consts[name]
				switch goV, declared := c.script.codes[name]; {
				case !bound:
					t.Errorf("returns %s, which it never binds", name)
				case !declared:
					t.Errorf("returns %s (%d), which Go does not declare for it", name, v)
				case goV != v:
					t.Errorf("returns %s = %d, which Go declares as %d", name, v, goV)
				}
			}
			for name := range c.script.codes {
				if !returned[name] {
					t.Errorf("Go declares %s, which the script never returns", name)
				}
			}
		})
	}
}

// allowedLiterals are the quoted strings a script may hold: the hash
// fields Go declares, the values of the domain's enumerations, and a few
// Redis tokens and patterns.
func allowedLiterals() map[string]string {
	allowed := map[string]string{}
	add := func(what string, vs ...string) {
		for _, v := range vs {
			allowed[v] = what
		}
	}
	for _, fs := range [][]string{taskFields, accountFields, keyFields, idemFields, queueFields, ledgerFields, secretFields, hookLogFields} {
		add("a field", fs...)
	}
	for _, s := range task.Statuses {
		add("a task status", string(s))
	}
	add("an event", task.Events...)
	for _, s := range webhook.States {
		add("a delivery state", string(s))
	}
	add("a ledger kind", account.Debit, account.Refund, account.Credit)
	add("an account status", string(account.Active), string(account.Disabled))
	add("a failure code", string(task.WorkerCrashed))
	add("the events channel", EventsChannel)
	// The names the scripts make from a shard's prefix (keys.go's taskKey,
	// accountKey, parkedKey: no job key any more, a task's input is in its
	// record) and of the due work's members (taskDue, hookDue), the kinds
	// of due work (DueKind) and a chunked field's suffix (pieceLen).
	add("a key's part", "a:", ":t:", "t:", "t|", "h|", ":", "acct", "parked", spendPart, usagePart)
	add("a usage field's suffix", usageTasks, usageCredits)
	for _, k := range []DueKind{DueCheck, DueExpire, DueHook} {
		add("a kind of due work", string(k))
	}
	add("the due work's member pattern", "^(%a)|([^|]+)|([^|]+)|?(.*)$", "t", "h")
	add("a chunked field's suffix", "+")
	add("an Idempotency-Key's state", "creating", "done")
	// Redis tokens, flags and the scripts' own patterns and separators.
	add("a token", "NX", "XX", "PX", "MINID", "LIMIT", "WITHSCORES", "+inf", "-inf", "*", "", "0", "1", "00", ",", "|", " ",
		"pending ", "[^,]+", `[^\n]+`, "^(%a+) (%d+)$", "%d")
	return allowed
}

var redisCommands = []string{"DEL", "EXISTS", "GET", "HDEL", "HEXISTS", "HGET", "HINCRBY", "HMGET", "HSET", "HSETNX", "PEXPIRE", "PEXPIREAT",
	"PUBLISH", "SET", "TIME", "XADD", "ZADD", "ZCARD", "ZPOPMIN", "ZRANGE", "ZRANGEBYSCORE", "ZREM", "ZREMRANGEBYSCORE"}

func TestScriptsNameOnlyDeclaredFields(t *testing.T) {
	allowed := allowedLiterals()
	files := map[string]string{}
	lib, _ := luaFiles.ReadFile("lua/lib.lua")
	files["lib"] = string(lib)
	for _, c := range scriptContracts {
		files[c.script.name] = c.script.body
	}
	for name, src := range files {
		code := stripLuaComments(src)
		if strings.Contains(code, `"`) {
			t.Errorf("%s.lua: quote strings with ' only", name)
		}
		commands := map[string]bool{}
		for _, m := range luaCall.FindAllStringSubmatch(code, -1) {
			commands[m[1]] = true
			if !slices.Contains(redisCommands, m[1]) {
				t.Errorf("%s.lua calls %s: add it to redisCommands if it is meant", name, m[1])
			}
		}
		for _, m := range luaQuoted.FindAllStringSubmatch(code, -1) {
			if _, ok := allowed[m[1]]; !ok && !commands[m[1]] {
				t.Errorf("%s.lua names %q, which Go declares as no field or value", name, m[1])
			}
		}
	}
}

func stripLuaComments(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}
