package service

import (
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

type gcDefault int

func (g gcDefault) DefaultGCPercent() int { return int(g) }

// A configuration's GOGC applies only when GOGC is unset.
func TestSetGCPercent(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	for _, tt := range []struct {
		name string
		gogc string
		cfg  any
		want int // the collector's percent after
	}{
		{"default applies", "", gcDefault(400), 400},
		{"GOGC wins", "150", gcDefault(400), 100},
		{"no default", "", struct{}{}, 100},
		{"zero default", "", gcDefault(0), 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			setGCPercent(zap.NewNop(), func(k string) string {
				if k == "GOGC" {
					return tt.gogc
				}
				return ""
			}, tt.cfg)
			if got := debug.SetGCPercent(100); got != tt.want {
				t.Errorf("GOGC %d; want %d", got, tt.want)
			}
		})
	}
}
