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

// Queues lists every tier's queue.
func Queues() []string {
	out := make([]string, len(catalog.Tiers))
	for i, t := range catalog.Tiers {
		out[i] = Queue(t)
	}
	return out
}

// GenerateImage is the job of one image task: everything a worker needs to
// run it without reading the task record first.
type GenerateImage struct {
	TaskID    string
	AccountID string
	// Input is the client's request with its defaults applied
	// (task.Input.WithDefaults); its Callback stays with the task record,
	// never in the job.
	Input      task.Input
	CreateTime time.Time
	// Deadline is when the task must end (the Asynq job's deadline).
	Deadline time.Time
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

func tierToProto(t catalog.Tier) jobv1.Tier {
	switch t {
	case catalog.Standard:
		return jobv1.Tier_TIER_STANDARD
	case catalog.Pro:
		return jobv1.Tier_TIER_PRO
	}
	return jobv1.Tier_TIER_UNSPECIFIED
}

func tierFromProto(t jobv1.Tier) (catalog.Tier, bool) {
	switch t {
	case jobv1.Tier_TIER_STANDARD:
		return catalog.Standard, true
	case jobv1.Tier_TIER_PRO:
		return catalog.Pro, true
	}
	return "", false
}

// check enforces the contract both ways: what a producer may send and a
// consumer may trust.
func (j GenerateImage) check() error {
	in := j.Input
	switch {
	case j.TaskID == "" || j.AccountID == "":
		return fmt.Errorf("jobs: a job needs a task id and an account id")
	case j.Deadline.IsZero():
		return fmt.Errorf("jobs: task %s: no deadline", j.TaskID)
	case in.Model.ID == "" || tierToProto(in.Model.Tier) == jobv1.Tier_TIER_UNSPECIFIED:
		return fmt.Errorf("jobs: task %s: unknown model %q of tier %q", j.TaskID, in.Model.ID, in.Model.Tier)
	case !catalog.ValidImageSize(in.ImageSize):
		return fmt.Errorf("jobs: task %s: image size %q", j.TaskID, in.ImageSize)
	case in.AspectRatio == "" && len(in.ImageURLs) == 0:
		return fmt.Errorf("jobs: task %s: text-to-image without an aspect ratio", j.TaskID)
	case in.AspectRatio != "" && !catalog.ValidAspectRatio(in.AspectRatio):
		return fmt.Errorf("jobs: task %s: aspect ratio %q", j.TaskID, in.AspectRatio)
	}
	return nil
}

// EncodeGenerateImage returns a job's payload: what NewGenerateImageTask
// queues, and what the task store keeps with a pending task so that a job a
// gateway could not queue can be queued later (DecodeGenerateImage). The
// input's callback is not in it: the task record keeps it.
func EncodeGenerateImage(j GenerateImage) ([]byte, error) {
	if err := j.check(); err != nil {
		return nil, err
	}
	in := j.Input
	b, err := proto.Marshal(&jobv1.GenerateImage{
		TaskId:       j.TaskID,
		AccountId:    j.AccountID,
		Model:        in.Model.ID,
		Tier:         tierToProto(in.Model.Tier),
		Prompt:       in.Prompt,
		AspectRatio:  in.AspectRatio,
		ImageSize:    in.ImageSize,
		ImageUrls:    in.ImageURLs,
		CreateTimeMs: j.CreateTime.UnixMilli(),
		DeadlineMs:   j.Deadline.UnixMilli(),
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: encode %s: %w", j.TaskID, err)
	}
	return b, nil
}

// NewGenerateImageTask builds the Asynq task of a run of a job (run is
// RunID(task id, n)): its TaskID is the run, it goes on its tier's queue and
// must end by the job's deadline.
func NewGenerateImageTask(j GenerateImage, run string) (*asynq.Task, error) {
	if run != j.TaskID && !strings.HasPrefix(run, j.TaskID+".r") {
		return nil, fmt.Errorf("jobs: %q is not a run of task %s", run, j.TaskID)
	}
	b, err := EncodeGenerateImage(j)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(TypeGenerateImage, b,
		asynq.TaskID(run),
		asynq.Queue(Queue(j.Input.Model.Tier)),
		asynq.MaxRetry(MaxRetry),
		asynq.Deadline(j.Deadline),
	), nil
}

// ParseGenerateImage decodes the job of a TypeGenerateImage task.
func ParseGenerateImage(t *asynq.Task) (GenerateImage, error) {
	if t.Type() != TypeGenerateImage {
		return GenerateImage{}, fmt.Errorf("jobs: task type %q is not %q", t.Type(), TypeGenerateImage)
	}
	return DecodeGenerateImage(t.Payload())
}

// DecodeGenerateImage decodes a job's payload (EncodeGenerateImage).
func DecodeGenerateImage(payload []byte) (GenerateImage, error) {
	p := &jobv1.GenerateImage{}
	if err := proto.Unmarshal(payload, p); err != nil {
		return GenerateImage{}, fmt.Errorf("jobs: decode payload: %w", err)
	}
	tier, _ := tierFromProto(p.GetTier())
	j := GenerateImage{
		TaskID:    p.GetTaskId(),
		AccountID: p.GetAccountId(),
		Input: task.Input{
			Model:       catalog.Model{ID: p.GetModel(), Tier: tier},
			Prompt:      p.GetPrompt(),
			AspectRatio: p.GetAspectRatio(),
			ImageSize:   p.GetImageSize(),
			ImageURLs:   p.GetImageUrls(),
		},
		CreateTime: time.UnixMilli(p.GetCreateTimeMs()),
	}
	if ms := p.GetDeadlineMs(); ms > 0 {
		j.Deadline = time.UnixMilli(ms)
	}
	if err := j.check(); err != nil {
		return GenerateImage{}, err
	}
	return j, nil
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
// (task.Admitted: its place freed, it left its account's parked tasks). A
// job that does not decode is skipped (its deadline fails the task); the
// first error is returned after trying every one: the tasks' queue checks
// queue what could not be queued now.
func (e *Enqueuer) EnqueueAdmitted(ctx context.Context, admitted []task.Admitted) error {
	var first error
	for _, a := range admitted {
		j, err := DecodeGenerateImage(a.Job)
		if err != nil {
			continue
		}
		if err := e.EnqueueGenerateImage(ctx, j, RunID(a.TaskID, 0)); err != nil && first == nil {
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

// EnqueueGenerateImage queues a run of an image job (RunID). A run that is
// queued already is not queued again, and is no error.
func (e *Enqueuer) EnqueueGenerateImage(ctx context.Context, j GenerateImage, run string) error {
	_, err := e.EnsureGenerateImage(ctx, j, run)
	return err
}

// EnsureGenerateImage is EnqueueGenerateImage reporting whether the run was
// missing from the queue (and is on it now).
func (e *Enqueuer) EnsureGenerateImage(ctx context.Context, j GenerateImage, run string) (added bool, _ error) {
	t, err := NewGenerateImageTask(j, run)
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
	Job GenerateImage
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
				j, err := DecodeGenerateImage(ti.Payload)
				if err != nil {
					continue // not ours to recover; Asynq will archive it
				}
				out = append(out, Orphan{Run: ti.ID, Job: j})
			}
			if len(infos) < page {
				break
			}
		}
	}
	return out, nil
}
