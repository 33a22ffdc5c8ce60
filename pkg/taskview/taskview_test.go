package taskview

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/task"
)

type fakeSigner struct{}

func (fakeSigner) Sign(path string, exp time.Time) string {
	return "https://img.example.com" + path + "?expires=" + exp.UTC().Format("20060102T150405")
}

func TestRecord(t *testing.T) {
	created := time.UnixMilli(1_795_000_000_000)
	ended := created.Add(3 * time.Second)
	base := task.Task{ID: "task_lumen_1", Type: task.Type, Model: "lumen-2.5-flash-image", CreateTime: created}
	for _, tc := range []struct {
		name string
		edit func(*task.Task)
		want string
	}{
		{"pending", func(t *task.Task) { t.Status = task.Pending },
			`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"complete_time":0,"results":[]}`},
		{"completed: results signed to expire 24 h after completion", func(t *task.Task) {
			t.Status, t.Progress, t.CompleteTime = task.Completed, 100, ended
			t.Results = []task.Result{{Key: "2026112214/ab.png"}}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"completed","progress":100,"create_time":1795000000000,"complete_time":1795000003000,"results":["https://img.example.com/v1/files/2026112214/ab.png?expires=20261119T110643"]}`},
		{"failed without a recorded failure", func(t *task.Task) { t.Status, t.CompleteTime, t.Progress = task.Failed, ended, 40 },
			`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"failed","progress":40,"create_time":1795000000000,"complete_time":1795000003000,"results":[],"error":{"code":"internal","message":"the task failed"}}`},
		{"canceled: no results, no error", func(t *task.Task) {
			t.Status, t.CompleteTime = task.Canceled, ended
			t.Results = []task.Result{{Key: "x.png"}}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"canceled","progress":0,"create_time":1795000000000,"complete_time":1795000003000,"results":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := base
			tc.edit(&tk)
			b, err := json.Marshal(New(&tk, fakeSigner{}))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b, tc.want)
			}
		})
	}
}
