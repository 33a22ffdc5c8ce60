package store

import (
	"context"
	"testing"
)

// A create keeps the traceparent it is given in the record's tp field, and
// Get and List read it back; a create without one writes no field.
func TestCreateKeepsTraceParent(t *testing.T) {
	t.Parallel()
	s, srv := newStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		id, tp string
	}{
		{"task_lumen_traced", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"task_lumen_untraced", ""},
	} {
		t.Run(tc.id, func(t *testing.T) {
			tk := pending("acct_a", tc.id)
			tk.TraceParent = tc.tp
			if _, err := s.tasks.Create(ctx, tk, std, nil); err != nil {
				t.Fatal(err)
			}
			got, err := s.tasks.Get(ctx, "acct_a", tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if got.TraceParent != tc.tp {
				t.Errorf("Get: TraceParent %q, want %q", got.TraceParent, tc.tp)
			}
			has := srv.Client(t).HExists(ctx, taskKey("acct_a", tc.id), fTaskTrace).Val()
			if has != (tc.tp != "") {
				t.Errorf("the record holds %s: %v, want %v", fTaskTrace, has, tc.tp != "")
			}
		})
	}
}
