// Package jobs is the queue contract between the gateway, which enqueues, and
// the workers, which process: job type names, queue names and the payload
// (the protobuf message easel.job.v1.GenerateImage). Both sides build and
// read tasks only through this package.
package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/easelhq/easel/pkg/catalog"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

// TypeGenerateImage is the Asynq type of an image task.
const TypeGenerateImage = "image:generate"

// MaxRetry bounds how many times a job is run again after a retryable error
// or a worker crash.
const MaxRetry = 3

// Queue returns the queue of a tier. Each tier has its own queue so its
// workers scale on their own (EASEL_QUEUES picks which a worker serves).
func Queue(t catalog.Tier) string { return string(t) }

// TierToProto and TierFromProto convert between catalog and payload tiers.
func TierToProto(t catalog.Tier) jobv1.Tier {
	switch t {
	case catalog.Standard:
		return jobv1.Tier_TIER_STANDARD
	case catalog.Pro:
		return jobv1.Tier_TIER_PRO
	}
	return jobv1.Tier_TIER_UNSPECIFIED
}

// TierFromProto converts a payload tier; ok is false for an unknown one.
func TierFromProto(t jobv1.Tier) (catalog.Tier, bool) {
	switch t {
	case jobv1.Tier_TIER_STANDARD:
		return catalog.Standard, true
	case jobv1.Tier_TIER_PRO:
		return catalog.Pro, true
	}
	return "", false
}

// NewGenerateImageTask builds the Asynq task for a payload: its TaskID is the
// task id (so it is never queued twice), it goes on its tier's queue and must
// end by deadline.
func NewGenerateImageTask(p *jobv1.GenerateImage, deadline time.Time) (*asynq.Task, error) {
	tier, ok := TierFromProto(p.GetTier())
	if !ok {
		return nil, fmt.Errorf("jobs: task %s: unknown tier %v", p.GetTaskId(), p.GetTier())
	}
	if p.GetTaskId() == "" || p.GetAccountId() == "" {
		return nil, fmt.Errorf("jobs: payload needs a task id and an account id")
	}
	b, err := proto.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode %s: %w", p.GetTaskId(), err)
	}
	return asynq.NewTask(TypeGenerateImage, b,
		asynq.TaskID(p.GetTaskId()),
		asynq.Queue(Queue(tier)),
		asynq.MaxRetry(MaxRetry),
		asynq.Deadline(deadline),
	), nil
}

// ParseGenerateImage decodes the payload of a TypeGenerateImage task.
func ParseGenerateImage(t *asynq.Task) (*jobv1.GenerateImage, error) {
	if t.Type() != TypeGenerateImage {
		return nil, fmt.Errorf("jobs: task type %q is not %q", t.Type(), TypeGenerateImage)
	}
	p := &jobv1.GenerateImage{}
	if err := proto.Unmarshal(t.Payload(), p); err != nil {
		return nil, fmt.Errorf("jobs: decode payload: %w", err)
	}
	if p.GetTaskId() == "" || p.GetAccountId() == "" {
		return nil, fmt.Errorf("jobs: payload without task or account id")
	}
	if _, ok := TierFromProto(p.GetTier()); !ok {
		return nil, fmt.Errorf("jobs: task %s: unknown tier %v", p.GetTaskId(), p.GetTier())
	}
	return p, nil
}

// Enqueuer puts image jobs on their queues.
type Enqueuer struct {
	client *asynq.Client
}

// NewEnqueuer returns an enqueuer on an existing Redis client, which the
// caller keeps and closes.
func NewEnqueuer(rdb redis.UniversalClient) *Enqueuer {
	return &Enqueuer{client: asynq.NewClientFromRedisClient(rdb)}
}

// Enqueue queues the job for a payload, to end by deadline.
func (e *Enqueuer) Enqueue(ctx context.Context, p *jobv1.GenerateImage, deadline time.Time) error {
	t, err := NewGenerateImageTask(p, deadline)
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, t); err != nil {
		return fmt.Errorf("jobs: enqueue %s: %w", p.GetTaskId(), err)
	}
	return nil
}
