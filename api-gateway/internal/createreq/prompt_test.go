package createreq

import (
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
)

// TestPromptText: a prompt is text. Invalid UTF-8, lone surrogates and NUL
// are refused with 400 naming the character, not stored as U+FFFD; valid
// text, escaped or not, decodes unchanged.
func TestPromptText(t *testing.T) {
	d := newDecoder(t)
	body := func(prompt string) []byte {
		return []byte(`{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":` + prompt + `}}`)
	}
	cases := []struct {
		name, prompt string // prompt: the raw JSON value
		want         string // the prompt decoded, or the error's part
		ok           bool
	}{
		{"plain", `"a cat"`, "a cat", true},
		{"escapes", `"a \"cat\"\n\t\\ \u00e9"`, "a \"cat\"\n\t\\ é", true},
		{"raw multibyte", `"猫 🐈"`, "猫 🐈", true},
		{"surrogate pair", `"cat \ud83d\udc08"`, "cat 🐈", true},
		{"upper-case hex pair", `"\uD83D\uDC08"`, "🐈", true},
		{"U+FFFD sent as such", `"\ufffd"`, "\ufffd", true},
		{"invalid UTF-8", "\"ab\xffcd\"", "invalid UTF-8 (byte 0xff) at character 3", false},
		{"truncated UTF-8", "\"abc\xe7\x8c\"", "invalid UTF-8 (byte 0xe7) at character 4", false},
		{"UTF-8 encoded surrogate", "\"a\xed\xa0\x80\"", "invalid UTF-8 (byte 0xed) at character 2", false},
		{"lone high surrogate", `"ab\ud800cd"`, `lone UTF-16 surrogate (\ud800) at character 3`, false},
		{"lone high at the end", `"ab\ud83d"`, `lone UTF-16 surrogate (\ud83d) at character 3`, false},
		{"high then non-surrogate", `"\ud83d\u0041"`, `lone UTF-16 surrogate (\ud83d) at character 1`, false},
		{"high then plain", `"\ud83dx"`, `lone UTF-16 surrogate (\ud83d) at character 1`, false},
		{"lone low surrogate", `"é\udc08"`, `lone UTF-16 surrogate (\udc08) at character 2`, false},
		{"NUL", `"cat\u0000"`, `NUL character (\u0000) at character 4`, false},
		{"after a pair", `"\ud83d\udc08\u0000"`, `at character 2`, false},
		{"not a string", `42`, "input.prompt must be a string", false},
		{"an object", `{"a":1}`, "input.prompt must be a string", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, err := d.Decode(body(c.prompt))
			if c.ok {
				if err != nil || in.Prompt != strings.TrimSpace(c.want) {
					t.Fatalf("prompt %s: %q, %v; want %q", c.prompt, in.Prompt, err, c.want)
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid || !strings.Contains(e.Message, c.want) {
				t.Fatalf("prompt %s: %v; want a 400 saying %q", c.prompt, err, c.want)
			}
		})
	}
}
