// Package jobs is the queue contract between the gateway, which enqueues, and
// the workers, which process: job type names, queue names, the payloads and
// their NewXxxTask constructors and ParseXxx decoders. Both sides build and
// read jobs only through this package, in domain values; the wire format
// (the protobuf messages of proto/easel/job/v1) never leaves it.
package jobs

import (
	"context"
	"fmt"
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
	// (task.Input.WithDefaults).
	Input      task.Input
	CreateTime time.Time
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

// NewGenerateImageTask builds the Asynq task of a job: its TaskID is the
// task id (so it is never queued twice), it goes on its tier's queue and must
// end by deadline.
func NewGenerateImageTask(j GenerateImage, deadline time.Time) (*asynq.Task, error) {
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
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: encode %s: %w", j.TaskID, err)
	}
	return asynq.NewTask(TypeGenerateImage, b,
		asynq.TaskID(j.TaskID),
		asynq.Queue(Queue(in.Model.Tier)),
		asynq.MaxRetry(MaxRetry),
		asynq.Deadline(deadline),
	), nil
}

// ParseGenerateImage decodes the job of a TypeGenerateImage task.
func ParseGenerateImage(t *asynq.Task) (GenerateImage, error) {
	if t.Type() != TypeGenerateImage {
		return GenerateImage{}, fmt.Errorf("jobs: task type %q is not %q", t.Type(), TypeGenerateImage)
	}
	p := &jobv1.GenerateImage{}
	if err := proto.Unmarshal(t.Payload(), p); err != nil {
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
	if err := j.check(); err != nil {
		return GenerateImage{}, err
	}
	return j, nil
}

// Enqueuer puts jobs on their queues.
type Enqueuer struct {
	client *asynq.Client
}

// NewEnqueuer returns an enqueuer on an existing Redis client, which the
// caller keeps and closes.
func NewEnqueuer(rdb redis.UniversalClient) *Enqueuer {
	return &Enqueuer{client: asynq.NewClientFromRedisClient(rdb)}
}

// EnqueueGenerateImage queues an image job, to end by deadline.
func (e *Enqueuer) EnqueueGenerateImage(ctx context.Context, j GenerateImage, deadline time.Time) error {
	t, err := NewGenerateImageTask(j, deadline)
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, t); err != nil {
		return fmt.Errorf("jobs: enqueue %s: %w", j.TaskID, err)
	}
	return nil
}
