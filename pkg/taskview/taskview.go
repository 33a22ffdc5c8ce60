// Package taskview renders the public task record: the JSON the query, the
// list, the stream and the webhooks answer with. The gateway and the
// workers (which deliver webhooks) render it here, so a record reads the
// same wherever it comes from.
package taskview

import (
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
)

// FilesPrefix starts every result URL path; the blob key follows.
const FilesPrefix = "/v1/files/"

// Signer makes result URLs (package signedurl).
type Signer interface {
	Sign(path string, expires time.Time) string
}

// Record is the public task record.
type Record struct {
	TaskID       string        `json:"task_id"`
	TaskType     string        `json:"task_type"`
	Model        string        `json:"model"`
	Status       task.Status   `json:"status"`
	Progress     int           `json:"progress"`
	CreateTime   int64         `json:"create_time"`
	CompleteTime int64         `json:"complete_time"`
	Results      []string      `json:"results"`
	Error        *task.Failure `json:"error,omitempty"`
	// QueuePosition and EtaMs are a pending task's place in its queue (1:
	// next) and the estimated milliseconds until a worker starts it; absent
	// otherwise, and EtaMs absent while there is no estimate.
	QueuePosition *int64 `json:"queue_position,omitempty"`
	EtaMs         *int64 `json:"eta_ms,omitempty"`
}

// New renders t, signing its result URLs with s.
func New(t *task.Task, s Signer) Record {
	v := Record{
		TaskID:     t.ID,
		TaskType:   t.Type,
		Model:      t.Model,
		Status:     t.Status,
		Progress:   t.Progress,
		CreateTime: t.CreateTime.UnixMilli(),
		Results:    []string{},
	}
	if !t.CompleteTime.IsZero() {
		v.CompleteTime = t.CompleteTime.UnixMilli()
	}
	if t.Status == task.Completed {
		v.Results = make([]string, len(t.Results))
		exp := t.ResultsExpire()
		for i, r := range t.Results {
			v.Results[i] = s.Sign(FilesPrefix+r.Key, exp)
		}
	}
	if t.Status == task.Failed {
		v.Error = t.Failure
		if v.Error == nil {
			v.Error = &task.Failure{Code: string(apperr.Internal), Message: "the task failed"}
		}
	}
	return v
}
