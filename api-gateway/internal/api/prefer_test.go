package api

import (
	"testing"
	"time"
)

func TestPreferWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		values  []string
		want    preference
		wantErr bool
	}{
		{"none", nil, preference{}, false},
		{"other preferences only", []string{"respond-async, return=minimal"}, preference{}, false},
		{"wait", []string{"wait=10"}, preference{set: true, wait: 10 * time.Second}, false},
		{"wait zero", []string{"wait=0"}, preference{set: true}, false},
		{"the longest", []string{"wait=60"}, preference{set: true, wait: time.Minute}, false},
		{"among others, any case, spaces", []string{"respond-async,  WAIT = 5 ;foo=bar"}, preference{set: true, wait: 5 * time.Second}, false},
		{"quoted", []string{`wait="7"`}, preference{set: true, wait: 7 * time.Second}, false},
		{"in a second header", []string{"return=minimal", "wait=3"}, preference{set: true, wait: 3 * time.Second}, false},
		{"too long", []string{"wait=600"}, preference{}, true},
		{"just past", []string{"wait=61"}, preference{}, true},
		{"negative", []string{"wait=-1"}, preference{}, true},
		{"fraction", []string{"wait=1.5"}, preference{}, true},
		{"no value", []string{"wait"}, preference{}, true},
		{"empty value", []string{"wait="}, preference{}, true},
		{"twice", []string{"wait=1, wait=2"}, preference{}, true},
		{"twice over headers", []string{"wait=1", "wait=1"}, preference{}, true},
		{"huge", []string{"wait=99999999999999999999"}, preference{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := preferWait(tt.values)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("preferWait(%q) = %+v, %v; want %+v, error %v", tt.values, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzPreferWait: any header value is a wait of 0 to MaxWait or an error,
// never a panic.
func FuzzPreferWait(f *testing.F) {
	for _, s := range []string{"wait=10", "respond-async, wait=0", `wait="60"`, "wait=61", "wait", "WAIT=1;x=y", ",,;=", "wait=1,wait=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p, err := preferWait([]string{v})
		if err == nil && (p.wait < 0 || p.wait > MaxWait || (!p.set && p.wait != 0)) {
			t.Fatalf("preferWait(%q) = %+v", v, p)
		}
	})
}
