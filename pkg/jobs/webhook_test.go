package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

func TestDeliverWebhookRoundTrip(t *testing.T) {
	for _, d := range []DeliverWebhook{
		{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventCompleted},
		{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventFailed},
		{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventCanceled},
		{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventProgress, Seq: 40},
		{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventCompleted, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		at, err := NewDeliverWebhookTask(d)
		if err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		got, err := ParseDeliverWebhook(at)
		if err != nil || got != d {
			t.Errorf("round trip of %+v = %+v, %v", d, got, err)
		}
	}
}

// A delivery's traceparent travels in its payload; an untraced delivery's
// payload is what it was before (an older producer's reads as untraced).
func TestDeliverWebhookTraceParent(t *testing.T) {
	d := DeliverWebhook{AccountID: "acct_a", TaskID: "task_lumen_1", Event: task.EventCompleted}
	traced := d
	traced.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	a, err := NewDeliverWebhookTask(d)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewDeliverWebhookTask(traced)
	if err != nil {
		t.Fatal(err)
	}
	old, err := proto.Marshal(&jobv1.DeliverWebhook{AccountId: d.AccountID, TaskId: d.TaskID, Event: d.Event})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, a.Payload()) {
		t.Errorf("an untraced payload changed: %q; before %q", a.Payload(), old)
	}
	if got, err := ParseDeliverWebhook(b); err != nil || got.TraceParent != traced.TraceParent {
		t.Errorf("traced delivery parses as %+v, %v", got, err)
	}
}

func TestDeliverWebhookRefused(t *testing.T) {
	for _, d := range []DeliverWebhook{
		{TaskID: "t", Event: task.EventCompleted},
		{AccountID: "a", Event: task.EventCompleted},
		{AccountID: "a", TaskID: "t", Event: "task.started"},
		{AccountID: "a", TaskID: "t", Event: ""},
		{AccountID: "a", TaskID: "t", Event: task.EventProgress, Seq: -1},
	} {
		if _, err := NewDeliverWebhookTask(d); err == nil {
			t.Errorf("NewDeliverWebhookTask(%+v): no error", d)
		}
	}
	enc := func(p *jobv1.DeliverWebhook) []byte { b, _ := proto.Marshal(p); return b }
	for _, bad := range []*asynq.Task{
		asynq.NewTask(TypeGenerateImage, enc(&jobv1.DeliverWebhook{AccountId: "a", TaskId: "t", Event: task.EventCompleted})),
		asynq.NewTask(TypeDeliverWebhook, []byte{0xff, 0xff, 0xff}),
		asynq.NewTask(TypeDeliverWebhook, enc(&jobv1.DeliverWebhook{AccountId: "a", TaskId: "t", Event: "task.nope"})),
		asynq.NewTask(TypeDeliverWebhook, enc(&jobv1.DeliverWebhook{AccountId: "a", Event: task.EventCompleted})),
		asynq.NewTask(TypeDeliverWebhook, enc(&jobv1.DeliverWebhook{AccountId: "a", TaskId: "t", Event: task.EventProgress, Seq: -3})),
	} {
		if _, err := ParseDeliverWebhook(bad); err == nil {
			t.Errorf("ParseDeliverWebhook(%s %s): no error", bad.Type(), bad.Payload())
		}
	}
}

type outbox struct {
	calls []string
	err   error
}

func (o *outbox) Queued(_ context.Context, accountID, taskID, event string, seq int) error {
	o.calls = append(o.calls, fmt.Sprintf("%s/%s/%s/%d", accountID, taskID, event, seq))
	return o.err
}

// An event is queued once, on its own queue, whoever queues it and however
// often; the other events of the task each get their own job; each queueing
// is recorded in the outbox.
func TestQueueHook(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	e := NewEnqueuer(rdb)
	ctx := context.Background()
	ob := &outbox{}
	steps := []struct {
		event string
		seq   int
	}{
		{task.EventProgress, 10}, {task.EventProgress, 10}, {task.EventProgress, 20},
		{task.EventCompleted, 0}, {task.EventCompleted, 0},
	}
	var wantCalls []string
	for _, step := range steps {
		if err := e.QueueHook(ctx, ob, DeliverWebhook{AccountID: "acct_a", TaskID: "task_lumen_1", Event: step.event, Seq: step.seq}); err != nil {
			t.Fatalf("QueueHook(%s, %d): %v", step.event, step.seq, err)
		}
		wantCalls = append(wantCalls, fmt.Sprintf("acct_a/task_lumen_1/%s/%d", step.event, step.seq))
	}
	if !slices.Equal(ob.calls, wantCalls) {
		t.Errorf("outbox calls %v; want %v", ob.calls, wantCalls)
	}
	infos, err := asynq.NewInspectorFromRedisClient(rdb).ListPendingTasks(WebhookQueue)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, ti := range infos {
		ids[ti.ID] = true
		if ti.MaxRetry != WebhookMaxRetry || ti.Type != TypeDeliverWebhook {
			t.Errorf("job %s: type %s, max retry %d", ti.ID, ti.Type, ti.MaxRetry)
		}
	}
	want := []string{"wh:task_lumen_1:task.progress:10", "wh:task_lumen_1:task.progress:20", "wh:task_lumen_1:task.completed:0"}
	if len(ids) != len(want) || len(infos) != len(want) {
		t.Errorf("queued %v; want %v", ids, want)
	}
	for _, id := range want {
		if !ids[id] {
			t.Errorf("%s not queued (have %v)", id, ids)
		}
	}

	// A failed enqueue leaves the event on the outbox for the recovery.
	ob = &outbox{}
	if err := e.QueueHook(ctx, ob, DeliverWebhook{AccountID: "acct_a", TaskID: "task_lumen_2", Event: "task.nope"}); err == nil || len(ob.calls) != 0 {
		t.Errorf("QueueHook of a bad event: %v, outbox calls %v", err, ob.calls)
	}
	ob = &outbox{err: errors.New("redis down")}
	if err := e.QueueHook(ctx, ob, DeliverWebhook{AccountID: "acct_a", TaskID: "task_lumen_2", Event: task.EventFailed}); err == nil {
		t.Error("QueueHook hid the outbox's error")
	}
}
