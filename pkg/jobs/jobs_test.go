package jobs

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

var pro = catalog.Model{ID: "lumen-3-pro-image-preview", Tier: catalog.Pro}

// A job round-trips in its two parts: the Ref its run's Asynq job carries
// (the run's id, queue and deadline are Asynq's, the payload only the
// account), and the input the task record keeps.
func TestRoundTrip(t *testing.T) {
	tests := map[string]GenerateImage{
		"edit with a ratio": {TaskID: "task_lumen_1", AccountID: "acct_x", CreateTime: time.UnixMilli(42), Deadline: time.UnixMilli(600_042),
			Input: task.Input{Model: pro, Prompt: "p", AspectRatio: "16:9", ImageSize: "2K", ImageURLs: []string{"https://e.com/a.png"}, OutputFormat: "png", NumImages: 1}},
		"edit, ratio from the source": {TaskID: "task_lumen_2", AccountID: "acct_x", CreateTime: time.UnixMilli(43), Deadline: time.UnixMilli(600_043),
			Input: task.Input{Model: pro, Prompt: "p", ImageSize: "1K", ImageURLs: []string{"https://e.com/a.png", "https://e.com/b.png"}, OutputFormat: "webp", OutputQuality: task.DefaultQuality, NumImages: 4}},
		"text-to-image": {TaskID: "task_lumen_3", AccountID: "acct_y", CreateTime: time.UnixMilli(44), Deadline: time.UnixMilli(600_044),
			Input: task.Input{Model: catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}, Prompt: "q", AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "png", NumImages: 1}},
		"jpeg at its default quality": {TaskID: "task_lumen_4", AccountID: "acct_y", CreateTime: time.UnixMilli(45), Deadline: time.UnixMilli(600_045),
			Input: task.Input{Model: pro, Prompt: "q", AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "jpeg", OutputQuality: task.DefaultQuality, NumImages: 2}},
		"jpeg at quality 1": {TaskID: "task_lumen_5", AccountID: "acct_y", CreateTime: time.UnixMilli(46), Deadline: time.UnixMilli(600_046),
			Input: task.Input{Model: pro, Prompt: "q", AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "jpeg", OutputQuality: 1, NumImages: 3}},
	}
	for name, j := range tests {
		t.Run(name, func(t *testing.T) {
			r := RefOf(j)
			if want := (Ref{AccountID: j.AccountID, TaskID: j.TaskID, Queue: Queue(j.Input.Model.Tier), Deadline: j.Deadline}); r != want {
				t.Errorf("RefOf = %+v; want %+v", r, want)
			}
			at, err := NewGenerateImageTask(r, j.TaskID)
			if err != nil {
				t.Fatal(err)
			}
			if at.Type() != TypeGenerateImage {
				t.Errorf("type %s", at.Type())
			}
			// The payload is the account alone.
			var p jobv1.ImageRun
			if err := proto.Unmarshal(at.Payload(), &p); err != nil || !proto.Equal(&p, &jobv1.ImageRun{AccountId: j.AccountID}) {
				t.Errorf("payload %v, %v; want the account %s alone", &p, err, j.AccountID)
			}
			got, err := ParseGenerateImage(at, j.TaskID, r.Queue, r.Deadline)
			if err != nil {
				t.Fatal(err)
			}
			if got != r {
				t.Errorf("round trip: %+v; want %+v", got, r)
			}

			// The model travels once, with the record: the input kept does
			// not name it, and reads back whole with the record's.
			b, err := EncodeInput(j.Input)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(j.Input.Model.ID)) {
				t.Errorf("the input kept names the model %s: %q", j.Input.Model.ID, b)
			}
			in, err := DecodeInput(b, j.Input.Model)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(in, j.Input) {
				t.Errorf("input round trip: %+v; want %+v", in, j.Input)
			}
		})
	}
}

// A run's trace context travels in its payload when whoever queued it
// knew it, and a payload without one (written before runs carried it, or
// by a promotion or recovery) reads as a Ref without it: the run then
// takes the task record's.
func TestImageRunTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	dl := time.UnixMilli(1_700_000_000_000)
	base := Ref{AccountID: "acct_x", TaskID: "task_lumen_7", Queue: Queue(catalog.Pro), Deadline: dl}
	traced, withState := base, base
	traced.TraceParent = tp
	withState.TraceParent, withState.TraceState = tp, "vendor=v1"
	tests := map[string]struct {
		payload []byte
		want    Ref
	}{
		"no trace context": {payload: encodeRun(t, base), want: base},
		"a traceparent":    {payload: encodeRun(t, traced), want: traced},
		"with tracestate":  {payload: encodeRun(t, withState), want: withState},
		// An older gateway's payload: the account alone, in field 1.
		"an older payload": {payload: protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "acct_x"), want: base},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGenerateImage(asynq.NewTask(TypeGenerateImage, tt.payload), base.TaskID, base.Queue, dl)
			if err != nil || got != tt.want {
				t.Errorf("parses as %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// An untraced run costs no byte more than before.
	if b := encodeRun(t, base); len(b) != len("acct_x")+2 {
		t.Errorf("an untraced payload is %d bytes: %q", len(b), b)
	}
}

func encodeRun(t *testing.T, r Ref) []byte {
	t.Helper()
	at, err := NewGenerateImageTask(r, r.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	return at.Payload()
}

// A run's Ref round-trips through its ImageRun payload (Asynq gives the
// reader the run's id, queue and deadline). A run of another task, a Ref
// without a deadline or on an unknown queue is never built; a run read
// without its id, a deadline or a known queue is refused.
func TestImageRun(t *testing.T) {
	dl := time.UnixMilli(1_700_000_000_000)
	r := Ref{AccountID: "acct_x", TaskID: "task_lumen_7", Queue: Queue(catalog.Pro), Deadline: dl}
	for _, run := range []string{r.TaskID, RunID(r.TaskID, 1), RunID(r.TaskID, 12)} {
		at, err := NewGenerateImageTask(r, run)
		if err != nil {
			t.Fatalf("run %s: %v", run, err)
		}
		got, err := ParseGenerateImage(at, run, r.Queue, r.Deadline)
		if err != nil || got != r {
			t.Errorf("run %s parses as %+v, %v; want %+v", run, got, err, r)
		}
	}
	// The task is the run's: the payload names none. A run read without
	// its run id, queue or deadline is refused.
	at, err := NewGenerateImageTask(r, r.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseGenerateImage(at, RunID("task_lumen_8", 2), r.Queue, dl); err != nil || got.TaskID != "task_lumen_8" {
		t.Errorf("run %s parses as %+v, %v", RunID("task_lumen_8", 2), got, err)
	}
	for name, tt := range map[string]struct {
		run, queue string
		deadline   time.Time
	}{
		"no run":                    {"", r.Queue, dl},
		"no deadline":               {r.TaskID, r.Queue, time.Time{}},
		"an unknown queue":          {r.TaskID, "default", dl},
		"no queue":                  {r.TaskID, "", dl},
		"the webhooks' queue":       {r.TaskID, WebhookQueue, dl},
		"another run, no deadline":  {RunID("task_lumen_8", 1), r.Queue, time.Time{}},
		"an unknown queue, run one": {RunID(r.TaskID, 1), "turbo", dl},
	} {
		if got, err := ParseGenerateImage(at, tt.run, tt.queue, tt.deadline); err == nil {
			t.Errorf("%s: parsed as %+v", name, got)
		}
	}
	for name, tt := range map[string]struct {
		ref Ref
		run string
	}{
		"a run of another task": {r, "task_lumen_8"},
		"a task it prefixes":    {r, r.TaskID + "1"},
		"no deadline":           {Ref{AccountID: r.AccountID, TaskID: r.TaskID, Queue: r.Queue}, r.TaskID},
		"an unknown queue":      {Ref{AccountID: r.AccountID, TaskID: r.TaskID, Queue: "default", Deadline: dl}, r.TaskID},
		"no queue":              {Ref{AccountID: r.AccountID, TaskID: r.TaskID, Deadline: dl}, r.TaskID},
		"no account":            {Ref{TaskID: r.TaskID, Queue: r.Queue, Deadline: dl}, r.TaskID},
		"no task":               {Ref{AccountID: r.AccountID, Queue: r.Queue, Deadline: dl}, ""},
	} {
		if _, err := NewGenerateImageTask(tt.ref, tt.run); err == nil {
			t.Errorf("%s: built a task", name)
		}
	}
}

func TestRejects(t *testing.T) {
	dl := time.UnixMilli(1_000)
	const std = "standard"
	enc := func(m proto.Message) []byte { b, _ := proto.Marshal(m); return b }
	good := &jobv1.ImageRun{AccountId: "a"}
	if _, err := ParseGenerateImage(asynq.NewTask(TypeGenerateImage, enc(good)), "t", std, dl); err != nil {
		t.Fatalf("the good payload: %v", err)
	}
	tests := map[string]struct {
		at       *asynq.Task
		run, q   string
		deadline time.Time
	}{
		"other type":    {asynq.NewTask("email:send", enc(good)), "t", std, dl},
		"garbage":       {asynq.NewTask(TypeGenerateImage, []byte{0xff, 0xff, 0xff}), "t", std, dl},
		"no account":    {asynq.NewTask(TypeGenerateImage, enc(&jobv1.ImageRun{})), "t", std, dl},
		"empty":         {asynq.NewTask(TypeGenerateImage, nil), "t", std, dl},
		"no deadline":   {asynq.NewTask(TypeGenerateImage, enc(good)), "t", std, time.Time{}},
		"no task":       {asynq.NewTask(TypeGenerateImage, enc(good)), "", std, dl},
		"unknown queue": {asynq.NewTask(TypeGenerateImage, enc(good)), "t", "elsewhere", dl},
	}
	for name, tt := range tests {
		if _, err := ParseGenerateImage(tt.at, tt.run, tt.q, tt.deadline); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}

	// The input is checked both ways: kept (EncodeInput) and read back
	// (DecodeInput), with its model (the record's, of its queue's tier).
	stdModel := catalog.Model{ID: "m", Tier: catalog.Standard}
	goodIn := &jobv1.ImageInput{AspectRatio: "1:1", ImageSize: "1K"}
	with := func(f func(p *jobv1.ImageInput)) []byte {
		p := proto.Clone(goodIn).(*jobv1.ImageInput)
		f(p)
		return enc(p)
	}
	if _, err := DecodeInput(enc(goodIn), stdModel); err != nil {
		t.Fatalf("the good input: %v", err)
	}
	for name, b := range map[string][]byte{
		"garbage":        {0xff, 0xff, 0xff},
		"no size":        with(func(p *jobv1.ImageInput) { p.ImageSize = "" }),
		"no ratio":       with(func(p *jobv1.ImageInput) { p.AspectRatio = "" }),
		"unknown ratio":  with(func(p *jobv1.ImageInput) { p.AspectRatio = "7:3" }),
		"unknown format": with(func(p *jobv1.ImageInput) { p.OutputFormat = "gif" }),
		"quality 101":    with(func(p *jobv1.ImageInput) { p.OutputFormat, p.OutputQuality = "jpeg", 101 }),
		"5 images":       with(func(p *jobv1.ImageInput) { p.NumImages = 5 }),
		"-1 images":      with(func(p *jobv1.ImageInput) { p.NumImages = -1 }),
		"empty":          nil,
	} {
		if _, err := DecodeInput(b, stdModel); err == nil {
			t.Errorf("input %s: decoded", name)
		}
	}
	for name, m := range map[string]catalog.Model{
		"no model":       {Tier: catalog.Standard},
		"no tier":        {ID: "m"},
		"unknown tier 9": {ID: "m", Tier: "9"},
	} {
		if _, err := DecodeInput(enc(goodIn), m); err == nil {
			t.Errorf("input with %s: decoded", name)
		}
	}
	if _, err := EncodeInput(task.Input{Model: catalog.Model{ID: "m"}, ImageSize: "1K", AspectRatio: "1:1"}); err == nil {
		t.Error("kept an input without a tier")
	}
	// An input an older gateway kept, with the model (1) and its tier (2)
	// inside, reads the same: what it holds of the model is ignored.
	older := protowire.AppendTag(nil, 1, protowire.BytesType)
	older = protowire.AppendString(older, "lumen-old-model")
	older = protowire.AppendTag(older, 2, protowire.VarintType)
	older = protowire.AppendVarint(older, 2)
	older = append(older, enc(goodIn)...)
	if in, err := DecodeInput(older, stdModel); err != nil || !reflect.DeepEqual(in, task.Input{Model: stdModel, AspectRatio: "1:1", ImageSize: "1K", OutputFormat: "png", NumImages: 1}) {
		t.Errorf("an older input read %+v, %v; want the record's model %+v with its own fields", in, err, stdModel)
	}
	// A job without a tier has no queue, nor one without a deadline a
	// run.
	if _, err := NewGenerateImageTask(RefOf(GenerateImage{TaskID: "t", AccountID: "a", Deadline: time.Now(), Input: task.Input{Model: catalog.Model{ID: "m"}, ImageSize: "1K", AspectRatio: "1:1"}}), "t"); err == nil {
		t.Error("built a task without a tier")
	}
	if _, err := NewGenerateImageTask(RefOf(GenerateImage{TaskID: "t", AccountID: "a", Input: task.Input{Model: pro, ImageSize: "1K", AspectRatio: "1:1"}}), "t"); err == nil {
		t.Error("built a task without a deadline")
	}
	// The callback is never in the input kept: the task record keeps it
	// apart.
	cb := task.Input{Model: pro, ImageSize: "1K", AspectRatio: "1:1",
		Callback: task.Callback{URL: "https://hooks.example/x", Events: task.DefaultEvents}}
	b, err := EncodeInput(cb)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := DecodeInput(b, pro); err != nil || back.Callback.URL != "" || len(back.Callback.Events) != 0 {
		t.Errorf("the callback was kept with the input: %+v, %v", back.Callback, err)
	}
	// Nor is anything of the job but its account in its Asynq payload.
	at, err := NewGenerateImageTask(RefOf(GenerateImage{TaskID: "t", AccountID: "a", Deadline: dl, Input: cb}), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(at.Payload(), enc(good)) {
		t.Errorf("the job's payload is %x; want the account alone (%x)", at.Payload(), enc(good))
	}
}

func TestQueuesPerTier(t *testing.T) {
	if Queue(catalog.Standard) == Queue(catalog.Pro) {
		t.Error("tiers share a queue")
	}
	for _, tier := range catalog.Tiers {
		// The tier travels as its queue (the input kept names none).
		if back := QueueTier(Queue(tier)); back != tier {
			t.Errorf("tier %s does not round-trip through its queue: %s", tier, back)
		}
	}
	if got := Queues(); len(got) != 2 || got[0] != "standard" || got[1] != "pro" {
		t.Errorf("Queues() = %v", got)
	}
}

func TestRuns(t *testing.T) {
	j := GenerateImage{TaskID: "task_lumen_7", AccountID: "a", CreateTime: time.UnixMilli(1), Deadline: time.UnixMilli(2),
		Input: task.Input{Model: pro, Prompt: "p", AspectRatio: "1:1", ImageSize: "1K"}.WithDefaults()}
	r := RefOf(j)
	for n, want := range map[int]string{0: "task_lumen_7", 1: "task_lumen_7.r1", 2: "task_lumen_7.r2"} {
		if got := RunID(j.TaskID, n); got != want {
			t.Errorf("RunID(%d) = %q; want %q", n, got, want)
		}
		if got := TaskOfRun(RunID(j.TaskID, n)); got != j.TaskID {
			t.Errorf("TaskOfRun(%q) = %q; want %q", RunID(j.TaskID, n), got, j.TaskID)
		}
		at, err := NewGenerateImageTask(r, RunID(j.TaskID, n))
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseGenerateImage(at, RunID(j.TaskID, n), r.Queue, r.Deadline)
		if err != nil || back.TaskID != j.TaskID || back != r {
			t.Errorf("run %d parses as %+v, %v; want %+v", n, back, err, r)
		}
	}
	if _, err := NewGenerateImageTask(r, "task_lumen_8"); err == nil {
		t.Error("queued a run of another task")
	}
	// The stored input is the one the run reads back, with the record's
	// model of its queue's tier.
	b, err := EncodeInput(j.Input)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeInput(b, catalog.Model{ID: pro.ID, Tier: QueueTier(r.Queue)})
	if err != nil || !reflect.DeepEqual(back, j.Input) {
		t.Errorf("DecodeInput(EncodeInput(in)) = %+v, %v", back, err)
	}
}

// A run ends at its task's deadline: CountMargin before the time the task
// store counts the task until, and says of it (task.Admitted,
// store.DueEntry, store.Started). A task the store knows no such time of
// has no run deadline, so no run is built for it.
func TestRunDeadline(t *testing.T) {
	until := time.UnixMilli(1_700_000_060_000)
	if got, want := RunDeadline(until), time.UnixMilli(1_700_000_000_000); !got.Equal(want) || CountMargin != time.Minute {
		t.Errorf("RunDeadline(%v) = %v; want %v (CountMargin %v)", until, got, want, CountMargin)
	}
	for _, none := range []time.Time{{}, time.UnixMilli(0)} {
		if got := RunDeadline(none); !got.IsZero() {
			t.Errorf("RunDeadline(%v) = %v; want none", none, got)
		}
		if _, err := NewGenerateImageTask(Ref{AccountID: "a", TaskID: "t", Queue: Queue(catalog.Standard), Deadline: RunDeadline(none)}, "t"); err == nil {
			t.Errorf("built a run by the deadline of a task counted until %v", none)
		}
	}
}

// An input at the defaults of what came later (PNG, one image) is kept in
// the bytes an input written before them took; what it shows is the same.
func TestDefaultsCostNoBytes(t *testing.T) {
	in := task.Input{Model: pro, Prompt: "a fox", AspectRatio: "1:1", ImageSize: "1K"}
	b, err := EncodeInput(in.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	before, _ := proto.Marshal(&jobv1.ImageInput{Prompt: "a fox", AspectRatio: "1:1", ImageSize: "1K"})
	if !bytes.Equal(b, before) {
		t.Errorf("kept %x; want %x", b, before)
	}
	shown, err := ShownInput(b, pro.ID)
	if err != nil || !reflect.DeepEqual(shown, in.WithDefaults()) {
		t.Errorf("shown %+v, %v; want %+v", shown, err, in.WithDefaults())
	}
	if _, err := ShownInput([]byte{0xff}, pro.ID); err == nil {
		t.Error("showed garbage")
	}
}
