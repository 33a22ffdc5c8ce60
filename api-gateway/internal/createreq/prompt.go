package createreq

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// promptText is input.prompt as the client sent it. encoding/json would
// quietly turn invalid UTF-8 and lone UTF-16 surrogates (\ud800) into
// U+FFFD and keep \u0000: a prompt is text, so those are refused, and the
// message says at which character.
type promptText string

// fieldError is a field's own decoding error; its message is the client's.
type fieldError struct{ msg string }

func (e *fieldError) Error() string { return e.msg }

// UnmarshalJSON checks the raw JSON string before decoding it.
func (p *promptText) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return &fieldError{"input.prompt must be a string"}
	}
	if why, at := badText(b); why != "" {
		return &fieldError{fmt.Sprintf("input.prompt has %s at character %d; a prompt must be text (UTF-8, no NUL)", why, at)}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*p = promptText(s)
	return nil
}

// badText reports the first character of the JSON string literal b (quotes
// included; its syntax already checked) that is not text, and its position
// in the decoded string, counted in characters from 1: invalid UTF-8, a
// lone surrogate escape, or NUL.
func badText(b []byte) (why string, at int) {
	n := 0
	for i := 1; i < len(b)-1; {
		n++
		c := b[i]
		switch {
		case c == '\\' && b[i+1] == 'u':
			r := hex4(b[i+2 : i+6])
			i += 6
			switch {
			case r == 0:
				return "a NUL character (\\u0000)", n
			case r >= 0xDC00 && r <= 0xDFFF:
				return "a lone UTF-16 surrogate (\\u" + strconv.FormatInt(int64(r), 16) + ")", n
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 > len(b)-1 || b[i] != '\\' || b[i+1] != 'u' {
					return "a lone UTF-16 surrogate (\\u" + strconv.FormatInt(int64(r), 16) + ")", n
				}
				if lo := hex4(b[i+2 : i+6]); lo < 0xDC00 || lo > 0xDFFF {
					return "a lone UTF-16 surrogate (\\u" + strconv.FormatInt(int64(r), 16) + ")", n
				}
				i += 6 // the pair is one character
			}
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return "invalid UTF-8 (byte 0x" + strconv.FormatUint(uint64(c), 16) + ")", n
			}
			i += size
		}
	}
	return "", 0
}

// hex4 is the value of four hex digits (JSON's syntax check guarantees
// them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		default:
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}
