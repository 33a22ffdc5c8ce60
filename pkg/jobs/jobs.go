// Package jobs is the queue contract between the gateway, which enqueues, and
// the workers, which process: job type names, queue names, the payloads and
// their NewXxxTask constructors and ParseXxx decoders. Both sides build and
// read jobs only through this package, in domain values; the wire format
// (the protobuf messages of proto/easel/job/v1) never leaves it.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

// TypeGenerateImage is the Asynq type of an image task.
const TypeGenerateImage = "image:generate"

// MaxRetry bounds how many times a job runs again after its worker crashed
// or could not record the outcome (Asynq's retries); the processor's own
// retries of the model are separate (see the worker's retry policy).
const MaxRetry = 3

// Queue returns the queue of a tier. Each tier has its own queue so its
// workers scale on their own (EASEL_QUEUES picks which a worker serves).
func Queue(t catalog.Tier) string { return string(t) }

// QueueTier is the tier whose queue is q (Queue): unknown if q is no
// tier's.
func QueueTier(q string) catalog.Tier { return catalog.Tier(q) }

// Queues lists every tier's queue.
func Queues() []string {
	out := make([]string, len(catalog.Tiers))
	for i, t := range catalog.Tiers {
		out[i] = Queue(t)
	}
	return out
}

// GenerateImage is the job of one image task, as a run carries it out: the
// task, what its client asked (Input), and its times. The Asynq job carries
// only which task it is (Ref); the input is kept with the task record
// (EncodeInput) and read back when the run starts the task.
type GenerateImage struct {
	TaskID    string
	AccountID string
	// Input is the client's request with its defaults applied
	// (task.Input.WithDefaults); its Callback stays with the task record,
	// never in the job, and its Model is the record's (EncodeInput).
	Input      task.Input
	CreateTime time.Time
	// Deadline is when the task must end (the Asynq job's deadline).
	Deadline time.Time
}

// Ref is what a run's Asynq job carries: which task of which account, on
// which queue, until when, and in which trace.
type Ref struct {
	AccountID, TaskID string
	Queue             string
	Deadline          time.Time
	// TraceParent and TraceState are the W3C trace context of the task's
	// create when it was traced (the run's span is its child); empty when
	// it was not, or when whoever queued the run did not know it (a
	// promotion, a recovery): the run then takes the task record's.
	TraceParent, TraceState string
}

// RefOf is the Ref of a job.
func RefOf(j GenerateImage) Ref {
	return Ref{AccountID: j.AccountID, TaskID: j.TaskID, Queue: Queue(j.Input.Model.Tier), Deadline: j.Deadline}
}

// CountMargin is how long past its deadline a task no run finished still
// counts as in flight: a create's task.Charge.CountUntil is the task's
// deadline plus CountMargin, when the workers' recovery fails it. What the
// task store says of a task's deadline (task.Admitted, store.DueEntry,
// store.Started) is that time; the task's runs end CountMargin earlier, at
// its deadline (RunDeadline), whoever queues them.
const CountMargin = time.Minute

// RunDeadline is the deadline of a task, and of its runs, that counts as
// in flight until countUntil (task.Charge.CountUntil). A task the store
// knows no such time of (zero, or Unix 0) has none: no run is queued for
// it.
func RunDeadline(countUntil time.Time) time.Time {
	if countUntil.UnixMilli() <= 0 {
		return time.Time{}
	}
	return countUntil.Add(-CountMargin)
}

// RunID is the Asynq TaskID of run n of a task: the task id for the first
// run, "<task id>.r<n>" for a run queued after run n-1's worker died. Each
// run's id is unique, so queueing a run twice is a conflict, never a second
// job; the task record names the run that owns it, and only that run may
// finish it.
func RunID(taskID string, n int) string {
	if n == 0 {
		return taskID
	}
	return taskID + ".r" + strconv.Itoa(n)
}

// TaskOfRun is the task a run (RunID) is of.
func TaskOfRun(run string) string {
	id, _, _ := strings.Cut(run, ".r")
	return id
}

// checkInput enforces the contract of an input both ways: what a producer
// may keep and a consumer may trust.
func checkInput(in task.Input) error {
	switch {
	case in.Model.ID == "" || !slices.Contains(catalog.Tiers, in.Model.Tier):
		return fmt.Errorf("jobs: unknown model %q of tier %q", in.Model.ID, in.Model.Tier)
	case !catalog.ValidImageSize(in.ImageSize):
		return fmt.Errorf("jobs: image size %q", in.ImageSize)
	case in.AspectRatio == "" && len(in.ImageURLs) == 0:
		return fmt.Errorf("jobs: text-to-image without an aspect ratio")
	case in.AspectRatio != "" && !catalog.ValidAspectRatio(in.AspectRatio):
		return fmt.Errorf("jobs: aspect ratio %q", in.AspectRatio)
	case task.FormatMIME(in.OutputFormat) == "":
		return fmt.Errorf("jobs: output format %q", in.OutputFormat)
	case in.OutputQuality != 0 && (in.OutputQuality < task.MinQuality || in.OutputQuality > task.MaxQuality):
		return fmt.Errorf("jobs: output quality %d", in.OutputQuality)
	case in.NumImages < 1 || in.NumImages > task.MaxImages:
		return fmt.Errorf("jobs: %d images", in.NumImages)
	}
	return nil
}

// EncodeInput returns what the task store keeps of a task's input
// (DecodeInput reads it back when a run starts the task). Neither its
// model nor its callback is in it: the task record keeps them apart (the
// model in the field its queries read), and each travels once.
func EncodeInput(in task.Input) ([]byte, error) {
	if in.OutputFormat == "" {
		in.OutputFormat = task.FormatPNG
	}
	if in.NumImages == 0 {
		in.NumImages = 1
	}
	if err := checkInput(in); err != nil {
		return nil, err
	}
	p := &jobv1.ImageInput{
		Prompt:      in.Prompt,
		AspectRatio: in.AspectRatio,
		ImageSize:   in.ImageSize,
		ImageUrls:   in.ImageURLs,
	}
	// What an input written before formats and counts reads as (PNG, one
	// image) is left out: the common input costs no byte more.
	if in.OutputFormat != task.FormatPNG {
		p.OutputFormat = in.OutputFormat
	}
	if task.Lossy(in.OutputFormat) && in.OutputQuality != task.DefaultQuality {
		p.OutputQuality = int32(in.OutputQuality)
	}
	if in.NumImages != 1 {
		p.NumImages = int32(in.NumImages)
	}
	b, err := proto.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode an input: %w", err)
	}
	return b, nil
}

// DecodeInput reads a task's input (EncodeInput) with its model: the task
// record's (store.Started's Model), of the tier of the queue its run came
// on (QueueTier). An input an older gateway wrote, with the model inside,
// reads the same: the model it holds is ignored.
func DecodeInput(b []byte, model catalog.Model) (task.Input, error) {
	in, err := readInput(b, model)
	if err != nil {
		return task.Input{}, err
	}
	if err := checkInput(in); err != nil {
		return task.Input{}, err
	}
	return in, nil
}

// readInput decodes an input (EncodeInput), its defaults applied to what
// it leaves out.
func readInput(b []byte, model catalog.Model) (task.Input, error) {
	var p jobv1.ImageInput
	if err := proto.Unmarshal(b, &p); err != nil {
		return task.Input{}, fmt.Errorf("jobs: decode an input: %w", err)
	}
	in := task.Input{
		Model:         model,
		Prompt:        p.GetPrompt(),
		AspectRatio:   p.GetAspectRatio(),
		ImageSize:     p.GetImageSize(),
		ImageURLs:     p.GetImageUrls(),
		OutputFormat:  p.GetOutputFormat(),
		OutputQuality: int(p.GetOutputQuality()),
		NumImages:     int(p.GetNumImages()),
	}
	if in.OutputFormat == "" {
		in.OutputFormat = task.FormatPNG
	}
	if in.OutputQuality == 0 && task.Lossy(in.OutputFormat) {
		in.OutputQuality = task.DefaultQuality
	}
	if in.NumImages == 0 {
		in.NumImages = 1
	}
	return in, nil
}

// ShownInput reads the input a task record keeps (EncodeInput) for the
// task's record as its owner sees it: the model is the record's (modelID,
// its tier from its id), and nothing is checked beyond the decoding.
func ShownInput(b []byte, modelID string) (task.Input, error) {
	return readInput(b, catalog.Model{ID: modelID, Tier: catalog.TierOfID(modelID)})
}

func (r Ref) check(run string) error {
	switch {
	case r.TaskID == "" || r.AccountID == "":
		return fmt.Errorf("jobs: a job needs a task id and an account id")
	case r.Deadline.IsZero():
		return fmt.Errorf("jobs: task %s: no deadline", r.TaskID)
	case !slices.Contains(Queues(), r.Queue):
		return fmt.Errorf("jobs: task %s: queue %q", r.TaskID, r.Queue)
	case TaskOfRun(run) != r.TaskID || (run != r.TaskID && !strings.HasPrefix(run, r.TaskID+".r")):
		return fmt.Errorf("jobs: %q is not a run of task %s", run, r.TaskID)
	}
	return nil
}

// NewGenerateImageTask builds the Asynq task of a run of a task (run is
// RunID(task id, n)): its TaskID is the run, it goes on the task's queue
// and must end by its deadline.
func NewGenerateImageTask(r Ref, run string) (*asynq.Task, error) {
	if err := r.check(run); err != nil {
		return nil, err
	}
	b, err := proto.Marshal(&jobv1.ImageRun{AccountId: r.AccountID, Traceparent: r.TraceParent, Tracestate: r.TraceState})
	if err != nil {
		return nil, fmt.Errorf("jobs: encode %s: %w", run, err)
	}
	return asynq.NewTask(TypeGenerateImage, b,
		asynq.TaskID(run),
		asynq.Queue(r.Queue),
		asynq.MaxRetry(MaxRetry),
		asynq.Deadline(r.Deadline),
	), nil
}

// ParseGenerateImage reads the job of a TypeGenerateImage task run: the
// run's TaskID, its queue and its deadline are Asynq's (the worker's
// handler passes them).
func ParseGenerateImage(t *asynq.Task, run, queue string, deadline time.Time) (Ref, error) {
	if t.Type() != TypeGenerateImage {
		return Ref{}, fmt.Errorf("jobs: task type %q is not %q", t.Type(), TypeGenerateImage)
	}
	return decodeRun(t.Payload(), run, queue, deadline)
}

func decodeRun(payload []byte, run, queue string, deadline time.Time) (Ref, error) {
	var p jobv1.ImageRun
	if err := proto.Unmarshal(payload, &p); err != nil {
		return Ref{}, fmt.Errorf("jobs: decode payload: %w", err)
	}
	r := Ref{
		AccountID: p.GetAccountId(), TaskID: TaskOfRun(run), Queue: queue, Deadline: deadline,
		TraceParent: p.GetTraceparent(), TraceState: p.GetTracestate(),
	}
	if err := r.check(run); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// CancelRun asks the worker running a run (RunID) to stop it: Asynq cancels
// the run's context, wherever it runs. A run no worker is running is no
// error.
func (e *Enqueuer) CancelRun(ctx context.Context, run string) error {
	if err := e.inspector.CancelProcessing(run); err != nil {
		return fmt.Errorf("jobs: cancel %s: %w", run, err)
	}
	return nil
}

// Enqueuer puts jobs on their queues, finds runs whose worker is gone, and
// which runs are missing from their queue.
type Enqueuer struct {
	rdb       redis.UniversalClient
	client    *asynq.Client
	inspector *asynq.Inspector
}

// NewEnqueuer returns an enqueuer on an existing Redis client, which the
// caller keeps and closes.
func NewEnqueuer(rdb redis.UniversalClient) *Enqueuer {
	return &Enqueuer{rdb: rdb, client: asynq.NewClientFromRedisClient(rdb), inspector: asynq.NewInspectorFromRedisClient(rdb)}
}

// EnqueueAdmitted queues the first run of each task a change admitted
// (task.Admitted: its place freed, it left its account's parked tasks).
// The first error is returned after trying every one: the tasks' queue
// checks queue what could not be queued now.
func (e *Enqueuer) EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error {
	var first error
	for _, a := range admitted {
		r := Ref{AccountID: a.AccountID, TaskID: a.TaskID, Queue: a.Queue, Deadline: RunDeadline(a.Deadline)}
		if err := e.EnqueueGenerateImage(ctx, r, RunID(a.TaskID, 0)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Run is a run of an image job and the queue it is on.
type Run struct{ Queue, ID string }

// asynqTaskKey is the key under which Asynq keeps a task of a queue, in
// any of its states (pending, scheduled, retry, active, archived,
// completed): asynq/internal/base.TaskKey. pkg/jobs is the one place that
// knows it (TestMissing checks it against a real Asynq).
func asynqTaskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }

// Missing reports, for each run, whether its queue has it in no state at
// all (lost: never queued, deleted, or lost in a failover), in one round
// trip (one per node on a cluster): what a queue check asks of a batch of
// pending tasks.
func (e *Enqueuer) Missing(ctx context.Context, runs []Run) ([]bool, error) {
	cmds := make([]*redis.IntCmd, len(runs))
	if _, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range runs {
			cmds[i] = p.Exists(ctx, asynqTaskKey(r.Queue, r.ID))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("jobs: queued runs: %w", err)
	}
	out := make([]bool, len(runs))
	for i, c := range cmds {
		out[i] = c.Val() == 0
	}
	return out, nil
}

// EnqueueGenerateImage queues a run of a task (RunID). A run that is
// queued already is not queued again, and is no error.
func (e *Enqueuer) EnqueueGenerateImage(ctx context.Context, r Ref, run string) error {
	_, err := e.EnsureGenerateImage(ctx, r, run)
	return err
}

// EnsureGenerateImage is EnqueueGenerateImage reporting whether the run was
// missing from the queue (and is on it now).
func (e *Enqueuer) EnsureGenerateImage(ctx context.Context, r Ref, run string) (added bool, _ error) {
	t, err := NewGenerateImageTask(r, run)
	if err != nil {
		return false, err
	}
	switch _, err := e.client.EnqueueContext(ctx, t); {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("jobs: enqueue %s: %w", run, err)
	}
	return true, nil
}

// Orphan is a run whose worker stopped extending its lease: it died, or lost
// Redis for longer than the lease (30 s). Asynq itself puts such runs back
// only a minute or two later; the workers' recovery hands the task to a new
// run sooner.
type Orphan struct {
	Run string
	Ref Ref
}

// Orphans lists the image runs, on the given queues, whose lease has run
// out.
func (e *Enqueuer) Orphans(ctx context.Context, queues []string) ([]Orphan, error) {
	var out []Orphan
	const page = 500
	for _, q := range queues {
		for n := 1; ; n++ {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			infos, err := e.inspector.ListActiveTasks(q, asynq.PageSize(page), asynq.Page(n))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break
			}
			if err != nil {
				return out, fmt.Errorf("jobs: active runs of %s: %w", q, err)
			}
			for _, ti := range infos {
				if !ti.IsOrphaned || ti.Type != TypeGenerateImage {
					continue
				}
				r, err := decodeRun(ti.Payload, ti.ID, ti.Queue, ti.Deadline)
				if err != nil {
					continue // not ours to recover; Asynq will archive it
				}
				out = append(out, Orphan{Run: ti.ID, Ref: r})
			}
			if len(infos) < page {
				break
			}
		}
	}
	return out, nil
}
