package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A run is queued once: queueing it again reports it was there already,
// and queueing another run of the same task adds that run.
func TestEnsureGenerateImage(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	e := NewEnqueuer(rdb)
	ctx := context.Background()
	now := time.Now()
	j := GenerateImage{TaskID: "task_lumen_1", AccountID: "acct_x", CreateTime: now, Deadline: now.Add(time.Minute),
		Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}}
	for _, step := range []struct {
		run  string
		want bool
	}{
		{RunID(j.TaskID, 0), true},
		{RunID(j.TaskID, 0), false},
		{RunID(j.TaskID, 1), true},
		{RunID(j.TaskID, 1), false},
	} {
		added, err := e.EnsureGenerateImage(ctx, RefOf(j), step.run)
		if err != nil || added != step.want {
			t.Errorf("EnsureGenerateImage(%s) = %v, %v; want %v", step.run, added, err, step.want)
		}
	}
	infos, err := asynq.NewInspectorFromRedisClient(rdb).ListPendingTasks(Queue(catalog.Standard))
	if err != nil || len(infos) != 2 {
		t.Errorf("%d runs pending (%v); want 2", len(infos), err)
	}
}
