package logging

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Info lines are buffered (written in batches); a warning or an error is
// written at once, with every line before it, in order: a process killed
// right after logging an error has written it.
func TestWarningsAndErrorsAreNotHeld(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		t.Run(level, func(t *testing.T) {
			var out syncBuffer
			log, err := New(&out, "info", FormatJSON, "test")
			if err != nil {
				t.Fatal(err)
			}
			log.Info("first")
			log.With().Info("second")
			if s := out.String(); s != "" {
				t.Fatalf("info lines were written at once: %q", s)
			}
			if level == "warn" {
				log.Warn("something is wrong")
			} else {
				log.Error("something is wrong")
			}
			s := out.String()
			i1, i2, i3 := strings.Index(s, `"first"`), strings.Index(s, `"second"`), strings.Index(s, `"something is wrong"`)
			if i1 < 0 || i2 < 0 || i3 < 0 || !(i1 < i2 && i2 < i3) {
				t.Errorf("after a %s line the output is %q; want the three lines, in order", level, s)
			}
		})
	}
}
