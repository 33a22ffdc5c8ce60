// Package task holds the task domain types shared by the gateway and the
// workers: statuses, the task record and its results.
package task

import "time"

// Status is a task's state. Transitions: pending → processing → completed or
// failed; pending → failed (enqueue failure, deadline). completed and failed
// are final.
type Status string

// Statuses.
const (
	Pending    Status = "pending"
	Processing Status = "processing"
	Completed  Status = "completed"
	Failed     Status = "failed"
)

// Final reports whether s is an end state.
func (s Status) Final() bool { return s == Completed || s == Failed }

// Type is the task_type of every task Easel runs.
const Type = "image"

// Kinds of image task, chosen by the presence of input.image_urls.
const (
	KindTextToImage = "text-to-image"
	KindEdit        = "edit"
)

// ResultTTL is how long a finished task and its result URLs stay available.
const ResultTTL = 24 * time.Hour

// Result is one stored output image.
type Result struct {
	// Key is the blob-store key, e.g. "task_lumen_123/0-1a2b3c4d5e6f7a8b.png".
	Key string `json:"key"`
	// ContentType is the image's media type, e.g. "image/png".
	ContentType string `json:"type"`
	// Size is the length in bytes.
	Size int64 `json:"size"`
	// Width and Height are the pixel dimensions.
	Width  int `json:"w"`
	Height int `json:"h"`
}

// Failure is why a task failed: a stable machine-readable code and a message a
// user can act on.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Task is the task record.
type Task struct {
	ID         string
	AccountID  string
	Type       string
	Model      string
	Status     Status
	Progress   int
	CreateTime time.Time
	// StartTime is when a worker first picked the task up; zero until then.
	StartTime time.Time
	// CompleteTime is zero until the task is completed or failed.
	CompleteTime time.Time
	Results      []Result
	Failure      *Failure
	// Price is what the task cost, in credits, debited at creation and
	// refunded if the task fails.
	Price int64
	// Refunded is true once a failed task's price has been returned.
	Refunded bool
}

// ResultsExpire returns when the task's result URLs stop working.
func (t *Task) ResultsExpire() time.Time { return t.CompleteTime.Add(ResultTTL) }
