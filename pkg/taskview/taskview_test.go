package taskview

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
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
			`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":0,"results":[],"price":0}`},
		{"completed: results signed to expire 24 h after completion", func(t *task.Task) {
			t.Status, t.Progress, t.CompleteTime = task.Completed, 100, ended
			t.Results = []task.Result{{Key: "2026112214/ab.png"}}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"completed","progress":100,"create_time":1795000000000,"start_time":0,"complete_time":1795000003000,"results":["https://img.example.com/v1/files/2026112214/ab.png?expires=20261119T110643"],"price":0}`},
		{"failed without a recorded failure", func(t *task.Task) { t.Status, t.CompleteTime, t.Progress = task.Failed, ended, 40 },
			`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"failed","progress":40,"create_time":1795000000000,"start_time":0,"complete_time":1795000003000,"results":[],"error":{"code":"internal","message":"the task failed"},"price":0}`},
		{"canceled: no results, no error", func(t *task.Task) {
			t.Status, t.CompleteTime = task.Canceled, ended
			t.Results = []task.Result{{Key: "x.png"}}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"canceled","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":1795000003000,"results":[],"price":0}`},
		{"its input, price and start: a pro edit to jpeg", func(t *task.Task) {
			t.Model, t.Status, t.Progress, t.Price, t.StartTime = "lumen-3-pro-image-preview", task.Processing, 40, 36, created.Add(1500*time.Millisecond)
			t.Input = &task.Input{Model: catalog.Model{ID: t.Model, Tier: catalog.Pro}, Prompt: "a fox", ImageSize: "2K",
				ImageURLs: []string{"https://e.com/a.png"}, OutputFormat: "jpeg", OutputQuality: 90, NumImages: 3}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-3-pro-image-preview","status":"processing","progress":40,"create_time":1795000000000,"start_time":1795000001500,"complete_time":0,"results":[],"price":36,"input":{"prompt":"a fox","image_size":"2K","image_urls":["https://e.com/a.png"],"output_format":"jpeg","output_quality":90,"num_images":3}}`},
		{"the standard model's input: no size, no quality for png", func(t *task.Task) {
			t.Status, t.Price = task.Pending, 4
			t.Input = &task.Input{Model: catalog.Model{ID: t.Model, Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "png", NumImages: 1}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":0,"results":[],"price":4,"input":{"prompt":"p","aspect_ratio":"1:1","output_format":"png","num_images":1}}`},
		{"webp shows its quality", func(t *task.Task) {
			t.Status, t.Price = task.Pending, 4
			t.Input = &task.Input{Model: catalog.Model{ID: t.Model, Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "webp", OutputQuality: 75, NumImages: 1}
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":0,"results":[],"price":4,"input":{"prompt":"p","aspect_ratio":"1:1","output_format":"webp","output_quality":75,"num_images":1}}`},
		{"traced: its trace id", func(t *task.Task) {
			t.Status, t.TraceParent = task.Pending, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		}, `{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":0,"results":[],"price":0,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`},
		{"a malformed traceparent: no trace id", func(t *task.Task) { t.Status, t.TraceParent = task.Pending, "00-xyz" },
			`{"task_id":"task_lumen_1","task_type":"image","model":"lumen-2.5-flash-image","status":"pending","progress":0,"create_time":1795000000000,"start_time":0,"complete_time":0,"results":[],"price":0}`},
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
