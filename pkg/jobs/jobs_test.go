package jobs

import (
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

var pro = catalog.Model{ID: "lumen-3-pro-image-preview", Tier: catalog.Pro}

func TestRoundTrip(t *testing.T) {
	tests := map[string]GenerateImage{
		"edit with a ratio": {TaskID: "task_lumen_1", AccountID: "acct_x", CreateTime: time.UnixMilli(42), Deadline: time.UnixMilli(600_042),
			Input: task.Input{Model: pro, Prompt: "p", AspectRatio: "16:9", ImageSize: "2K", ImageURLs: []string{"https://e.com/a.png"}}},
		"edit, ratio from the source": {TaskID: "task_lumen_2", AccountID: "acct_x", CreateTime: time.UnixMilli(43), Deadline: time.UnixMilli(600_043),
			Input: task.Input{Model: pro, Prompt: "p", ImageSize: "1K", ImageURLs: []string{"https://e.com/a.png", "https://e.com/b.png"}}},
		"text-to-image": {TaskID: "task_lumen_3", AccountID: "acct_y", CreateTime: time.UnixMilli(44), Deadline: time.UnixMilli(600_044),
			Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "q", AspectRatio: "1:1", ImageSize: "1K"}},
	}
	for name, j := range tests {
		t.Run(name, func(t *testing.T) {
			at, err := NewGenerateImageTask(j, j.TaskID)
			if err != nil {
				t.Fatal(err)
			}
			if at.Type() != TypeGenerateImage {
				t.Errorf("type %s", at.Type())
			}
			got, err := ParseGenerateImage(at)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, j) {
				t.Errorf("round trip: %+v; want %+v", got, j)
			}
		})
	}
}

func TestRejects(t *testing.T) {
	enc := func(p *jobv1.GenerateImage) []byte { b, _ := proto.Marshal(p); return b }
	good := &jobv1.GenerateImage{TaskId: "t", AccountId: "a", Model: "m", Tier: jobv1.Tier_TIER_STANDARD, AspectRatio: "1:1", ImageSize: "1K", DeadlineMs: 1}
	with := func(f func(p *jobv1.GenerateImage)) []byte {
		p := proto.Clone(good).(*jobv1.GenerateImage)
		f(p)
		return enc(p)
	}
	if _, err := ParseGenerateImage(asynq.NewTask(TypeGenerateImage, enc(good))); err != nil {
		t.Fatalf("the good payload: %v", err)
	}
	tests := map[string]*asynq.Task{
		"other type":     asynq.NewTask("email:send", enc(good)),
		"garbage":        asynq.NewTask(TypeGenerateImage, []byte{0xff, 0xff, 0xff}),
		"no tier":        asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.Tier = 0 })),
		"no account":     asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.AccountId = "" })),
		"no size":        asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.ImageSize = "" })),
		"no ratio":       asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.AspectRatio = "" })),
		"unknown ratio":  asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.AspectRatio = "7:3" })),
		"empty":          asynq.NewTask(TypeGenerateImage, nil),
		"no model":       asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.Model = "" })),
		"unknown tier 9": asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.Tier = 9 })),
		"no deadline":    asynq.NewTask(TypeGenerateImage, with(func(p *jobv1.GenerateImage) { p.DeadlineMs = 0 })),
	}
	for name, at := range tests {
		if _, err := ParseGenerateImage(at); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := NewGenerateImageTask(GenerateImage{TaskID: "t", AccountID: "a", Deadline: time.Now(), Input: task.Input{Model: catalog.Model{ID: "m"}, ImageSize: "1K", AspectRatio: "1:1"}}, "t"); err == nil {
		t.Error("built a task without a tier")
	}
	if _, err := NewGenerateImageTask(GenerateImage{TaskID: "t", AccountID: "a", Input: task.Input{Model: pro, ImageSize: "1K", AspectRatio: "1:1"}}, "t"); err == nil {
		t.Error("built a task without a deadline")
	}
	// The callback never travels in the job: the task record keeps it.
	cb := GenerateImage{TaskID: "t", AccountID: "a", Deadline: time.UnixMilli(5), Input: task.Input{Model: pro, ImageSize: "1K", AspectRatio: "1:1",
		Callback: task.Callback{URL: "https://hooks.example/x", Events: task.DefaultEvents}}}
	b, err := EncodeGenerateImage(cb)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeGenerateImage(b); err != nil || back.Input.Callback.URL != "" || len(back.Input.Callback.Events) != 0 {
		t.Errorf("the callback travelled in the job: %+v, %v", back.Input.Callback, err)
	}
}

func TestQueuesPerTier(t *testing.T) {
	if Queue(catalog.Standard) == Queue(catalog.Pro) {
		t.Error("tiers share a queue")
	}
	for _, tier := range catalog.Tiers {
		back, ok := tierFromProto(tierToProto(tier))
		if !ok || back != tier {
			t.Errorf("tier %s does not round-trip", tier)
		}
	}
	if got := Queues(); len(got) != 2 || got[0] != "standard" || got[1] != "pro" {
		t.Errorf("Queues() = %v", got)
	}
}

func TestRuns(t *testing.T) {
	j := GenerateImage{TaskID: "task_lumen_7", AccountID: "a", CreateTime: time.UnixMilli(1), Deadline: time.UnixMilli(2),
		Input: task.Input{Model: pro, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	for n, want := range map[int]string{0: "task_lumen_7", 1: "task_lumen_7.r1", 2: "task_lumen_7.r2"} {
		if got := RunID(j.TaskID, n); got != want {
			t.Errorf("RunID(%d) = %q; want %q", n, got, want)
		}
		at, err := NewGenerateImageTask(j, RunID(j.TaskID, n))
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseGenerateImage(at)
		if err != nil || back.TaskID != j.TaskID {
			t.Errorf("run %d parses as task %q, %v", n, back.TaskID, err)
		}
	}
	if _, err := NewGenerateImageTask(j, "task_lumen_8"); err == nil {
		t.Error("queued a run of another task")
	}
	// The stored payload is the queued one.
	b, err := EncodeGenerateImage(j)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeGenerateImage(b)
	if err != nil || !reflect.DeepEqual(back, j) {
		t.Errorf("Decode(Encode(j)) = %+v, %v", back, err)
	}
}
