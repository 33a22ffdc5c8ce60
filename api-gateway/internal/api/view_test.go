package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/signedurl"
	"github.com/easelhq/easel/pkg/task"
)

// BenchmarkTaskView is the cost of rendering a completed task as the query
// answers it, its input shown: signing its result URL and encoding the JSON.
func BenchmarkTaskView(b *testing.B) {
	h := &Handlers{Deps: Deps{Signer: signedurl.New([]byte("0123456789abcdef0123456789abcdef"), "https://img.example.com")}}
	now := time.Now()
	t := &task.Task{
		ID: "task_lumen_2170455969821192122696478843056611060", Type: "image", Model: "lumen-2.5-flash-image",
		Status: task.Completed, Progress: 100, CreateTime: now, CompleteTime: now,
		Results: []task.Result{{Key: "2026112214/0123456789abcdef0123456789abcdef.png", ContentType: "image/png", Size: 217887, Width: 1344, Height: 768}},
		Price:   4,
		Input:   &task.Input{Prompt: "a watercolor fox in a snowy forest at dawn, soft light", AspectRatio: "16:9", OutputFormat: task.FormatPNG, NumImages: 1},
	}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(h.view(t)); err != nil {
			b.Fatal(err)
		}
	}
}
