// Package tasks is the gateway's task service: it creates tasks (record, then
// job) and reads them back for their owner.
package tasks

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/task"
	jobv1 "github.com/easelhq/easel/proto/easel/job/v1"
)

// Store keeps task records.
type Store interface {
	Create(ctx context.Context, t *task.Task) error
	Get(ctx context.Context, accountID, taskID string) (*task.Task, error)
	DeletePending(ctx context.Context, accountID, taskID string) (bool, error)
}

// Queue takes jobs.
type Queue interface {
	Enqueue(ctx context.Context, p *jobv1.GenerateImage, deadline time.Time) error
}

// IDs makes task ids.
type IDs interface {
	New() (string, error)
}

// Service creates and reads tasks.
type Service struct {
	store    Store
	queue    Queue
	ids      IDs
	deadline time.Duration
	now      func() time.Time
}

// NewService returns a service. Each task must end within deadline of its
// creation.
func NewService(store Store, queue Queue, ids IDs, deadline time.Duration) *Service {
	return &Service{store: store, queue: queue, ids: ids, deadline: deadline, now: time.Now}
}

// Create records a pending task for an account and queues its job. If the
// job cannot be queued, the record is removed and the error is
// apperr.Unavailable: no task is left pending with nothing to run it.
func (s *Service) Create(ctx context.Context, accountID string, r createreq.Request) (string, error) {
	id, err := s.ids.New()
	if err != nil {
		return "", apperr.Wrap(err, apperr.Internal, "could not create the task")
	}
	log := logging.From(ctx).With(zap.String("task_id", id))
	now := s.now()
	t := &task.Task{
		ID:         id,
		AccountID:  accountID,
		Type:       task.Type,
		Model:      r.Model.ID,
		Status:     task.Pending,
		CreateTime: now,
	}
	if err := s.store.Create(ctx, t); err != nil {
		return "", apperr.Transient(err, apperr.Unavailable, "the task store is unavailable; the task was not created, try again")
	}
	payload := &jobv1.GenerateImage{
		TaskId:       id,
		AccountId:    accountID,
		Model:        r.Model.ID,
		Tier:         jobs.TierToProto(r.Model.Tier),
		Prompt:       r.Prompt,
		AspectRatio:  r.AspectRatio,
		ImageSize:    r.ImageSize,
		ImageUrls:    r.ImageURLs,
		CreateTimeMs: now.UnixMilli(),
	}
	if err := s.queue.Enqueue(ctx, payload, now.Add(s.deadline)); err != nil {
		// Undo with a context of our own: the request's may be what failed.
		undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, derr := s.store.DeletePending(undoCtx, accountID, id); derr != nil {
			log.Error("could not remove the record of a task that was not queued", zap.Error(derr))
		}
		return "", apperr.Transient(err, apperr.Unavailable, "the task queue is unavailable; the task was not created, try again")
	}
	log.Info("task created", zap.String("model", r.Model.ID), zap.String("kind", r.Kind()))
	return id, nil
}

// Get returns a task of the account. Another account's task is
// apperr.NotFound, exactly as a task that does not exist.
func (s *Service) Get(ctx context.Context, accountID, taskID string) (*task.Task, error) {
	t, err := s.store.Get(ctx, accountID, taskID)
	if err != nil && apperr.CodeOf(err) != apperr.NotFound {
		return nil, apperr.Transient(err, apperr.Unavailable, "the task store is unavailable, try again")
	}
	return t, err
}
