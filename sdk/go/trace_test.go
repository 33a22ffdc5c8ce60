package easel

import (
	"encoding/json"
	"testing"
)

// A record's trace_id, present only on a traced task, reads into TraceID
// and marshals back as it came.
func TestTaskTraceID(t *testing.T) {
	for _, tc := range []struct{ name, rec, want string }{
		{"traced", `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1,"start_time":0,"complete_time":0,"results":[],"price":4,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`,
			"4bf92f3577b34da6a3ce929d0e0e4736"},
		{"untraced", `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1,"start_time":0,"complete_time":0,"results":[],"price":4}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var task Task
			if err := json.Unmarshal([]byte(tc.rec), &task); err != nil {
				t.Fatal(err)
			}
			if task.TraceID != tc.want {
				t.Errorf("TraceID %q, want %q", task.TraceID, tc.want)
			}
			b, err := json.Marshal(task)
			if err != nil || string(b) != tc.rec {
				t.Errorf("marshalled back\n%s\nwant\n%s (%v)", b, tc.rec, err)
			}
		})
	}
}
