package jobs

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/catalog"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

func TestRoundTrip(t *testing.T) {
	p := &jobv1.GenerateImage{
		TaskId: "task_lumen_1", AccountId: "acct_x", Model: "lumen-3-pro-image-preview", Tier: TierToProto(catalog.Pro),
		Prompt: "p", AspectRatio: "16:9", ImageSize: "2K", ImageUrls: []string{"https://e.com/a.png"}, CreateTimeMs: 42,
	}
	task, err := NewGenerateImageTask(p, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if task.Type() != TypeGenerateImage {
		t.Errorf("type %s", task.Type())
	}
	got, err := ParseGenerateImage(task)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, p) {
		t.Errorf("round trip: %v; want %v", got, p)
	}
}

func TestRejects(t *testing.T) {
	good := &jobv1.GenerateImage{TaskId: "t", AccountId: "a", Tier: jobv1.Tier_TIER_STANDARD}
	b, _ := proto.Marshal(good)
	noTier, _ := proto.Marshal(&jobv1.GenerateImage{TaskId: "t", AccountId: "a"})
	noAcct, _ := proto.Marshal(&jobv1.GenerateImage{TaskId: "t", Tier: jobv1.Tier_TIER_PRO})
	tests := map[string]*asynq.Task{
		"other type": asynq.NewTask("email:send", b),
		"garbage":    asynq.NewTask(TypeGenerateImage, []byte{0xff, 0xff, 0xff}),
		"no tier":    asynq.NewTask(TypeGenerateImage, noTier),
		"no account": asynq.NewTask(TypeGenerateImage, noAcct),
		"empty":      asynq.NewTask(TypeGenerateImage, nil),
	}
	for name, task := range tests {
		if _, err := ParseGenerateImage(task); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := NewGenerateImageTask(&jobv1.GenerateImage{TaskId: "t", AccountId: "a"}, time.Now()); err == nil {
		t.Error("built a task without a tier")
	}
}

func TestQueuesPerTier(t *testing.T) {
	if Queue(catalog.Standard) == Queue(catalog.Pro) {
		t.Error("tiers share a queue")
	}
	for _, tier := range catalog.Tiers {
		back, ok := TierFromProto(TierToProto(tier))
		if !ok || back != tier {
			t.Errorf("tier %s does not round-trip", tier)
		}
	}
}
