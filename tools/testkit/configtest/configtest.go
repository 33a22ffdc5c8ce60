// Package configtest runs the table tests of a configuration loader: each
// case an environment and the error it must give.
package configtest

import (
	"strings"
	"testing"
)

// Unset, as a value, removes a variable from the environment Env builds.
const Unset = "<unset>"

// Env returns base with the given variable and value pairs set (Unset
// removes one). base is not changed.
func Env(base map[string]string, kv ...string) map[string]string {
	m := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == Unset {
			delete(m, kv[i])
			continue
		}
		m[kv[i]] = kv[i+1]
	}
	return m
}

// Case is an environment and what loading it must give: "" for no error,
// else a substring of the error.
type Case struct {
	Name string
	Env  map[string]string
	Want string
}

// Run loads each case's environment and checks the outcome. Secrets listed
// in never must not appear in any error.
func Run(t *testing.T, load func(env map[string]string) error, cases []Case, never ...string) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			err := load(tt.Env)
			switch {
			case tt.Want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.Want != "" && (err == nil || !strings.Contains(err.Error(), tt.Want)):
				t.Fatalf("error %v; want one containing %q", err, tt.Want)
			}
			for _, s := range never {
				if err != nil && strings.Contains(err.Error(), s) {
					t.Errorf("error leaks %q: %v", s, err)
				}
			}
		})
	}
}

// Load loads a service's configuration from base with env's variables
// over it, and fails the test if it does not load.
func Load[C any](tb testing.TB, load func(env map[string]string) (C, error), base, env map[string]string) C {
	tb.Helper()
	merged := make(map[string]string, len(base)+len(env))
	for k, v := range base {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	c, err := load(merged)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
