// Package taskview renders the public task record: the JSON the query, the
// list, the stream and the webhooks answer with. The gateway and the
// workers (which deliver webhooks) render it here, so a record reads the
// same wherever it comes from.
package taskview

import (
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
)

// FilesPrefix starts every result URL path; the blob key follows.
const FilesPrefix = "/v1/files/"

// Signer makes result URLs (package signedurl).
type Signer interface {
	Sign(path string, expires time.Time) string
}

// Record is the public task record.
type Record struct {
	TaskID     string      `json:"task_id"`
	TaskType   string      `json:"task_type"`
	Model      string      `json:"model"`
	Status     task.Status `json:"status"`
	Progress   int         `json:"progress"`
	CreateTime int64       `json:"create_time"`
	// StartTime is when a worker began generating (Unix ms, as
	// CreateTime); 0 until then.
	StartTime    int64         `json:"start_time"`
	CompleteTime int64         `json:"complete_time"`
	Results      []string      `json:"results"`
	Error        *task.Failure `json:"error,omitempty"`
	// Price is the credits the task was charged at its creation (its
	// model's price per image × input.num_images); what a failed task, or
	// the images a completed one could not make, gave back is refunded
	// apart (the ledger says so).
	Price int64 `json:"price"`
	// Input is what the task was asked, its defaults applied; absent for a
	// record that keeps none.
	Input *Input `json:"input,omitempty"`
	// QueuePosition and EtaMs are a pending task's place in its queue (1:
	// next) and the estimated milliseconds until a worker starts it; absent
	// otherwise, and EtaMs absent while there is no estimate.
	QueuePosition *int64 `json:"queue_position,omitempty"`
	EtaMs         *int64 `json:"eta_ms,omitempty"`
	// TraceID is the trace of the task (its create, its run, its
	// webhooks), 32 hex digits, when tracing was on and sampled its
	// create; absent otherwise.
	TraceID string `json:"trace_id,omitempty"`
}

// Input is a task's input as its record shows it.
type Input struct {
	Prompt string `json:"prompt"`
	// AspectRatio is absent for an edit that named none: its ratio is its
	// first source image's nearest.
	AspectRatio string `json:"aspect_ratio,omitempty"`
	// ImageSize is shown for a model that takes one.
	ImageSize string   `json:"image_size,omitempty"`
	ImageURLs []string `json:"image_urls,omitempty"`
	// OutputFormat is png, jpeg or webp; OutputQuality is shown for jpeg
	// and webp (webp at 100: lossless).
	OutputFormat  string `json:"output_format"`
	OutputQuality int    `json:"output_quality,omitempty"`
	NumImages     int    `json:"num_images"`
}

// NewInput renders an input.
func NewInput(in *task.Input) *Input {
	v := &Input{
		Prompt:       in.Prompt,
		AspectRatio:  in.AspectRatio,
		ImageURLs:    in.ImageURLs,
		OutputFormat: in.OutputFormat,
		NumImages:    in.NumImages,
	}
	if in.Model.SupportsImageSize() {
		v.ImageSize = in.ImageSize
	}
	if task.Lossy(in.OutputFormat) {
		v.OutputQuality = in.OutputQuality
	}
	return v
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
		Price:      t.Price,
		TraceID:    tracing.TraceIDOf(t.TraceParent),
	}
	if !t.StartTime.IsZero() {
		v.StartTime = t.StartTime.UnixMilli()
	}
	if !t.CompleteTime.IsZero() {
		v.CompleteTime = t.CompleteTime.UnixMilli()
	}
	if t.Input != nil {
		v.Input = NewInput(t.Input)
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
