package easel

import (
	"strings"
	"time"
)

// Status is a task's state: pending → processing → completed, failed or
// canceled. A task can also fail or be canceled straight from pending.
type Status string

// Statuses.
const (
	StatusPending    Status = "pending"
	StatusProcessing Status = "processing"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
	StatusCanceled   Status = "canceled"
)

// Final reports whether the status never changes again.
func (s Status) Final() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCanceled
}

// The models of the default family word, "lumen". A server run with
// another EASEL_MODEL_FAMILY names them with its own word: see StandardModel
// and ProModel.
const (
	ModelStandard = "lumen-2.5-flash-image"
	ModelPro      = "lumen-3-pro-image-preview"
)

// StandardModel returns the id of the standard model of a family word.
func StandardModel(family string) string { return family + "-2.5-flash-image" }

// ProModel returns the id of the pro model of a family word; only it takes
// an ImageSize.
func ProModel(family string) string { return family + "-3-pro-image-preview" }

// IsPro reports whether a model id names a pro model.
func IsPro(model string) bool { return strings.HasSuffix(model, "-3-pro-image-preview") }

// Webhook event types, for CreateRequest.CallbackEvents.
const (
	EventCompleted = "task.completed"
	EventFailed    = "task.failed"
	EventCanceled  = "task.canceled"
	EventProgress  = "task.progress"
)

// CreateRequest is a new task. Model and Prompt are required; the rest is
// optional and left out of the request when zero.
type CreateRequest struct {
	Model  string
	Prompt string
	// AspectRatio is one of 1:1 2:3 3:2 3:4 4:3 4:5 5:4 9:16 16:9 21:9.
	AspectRatio string
	// ImageSize is 1K, 2K or 4K, for a pro model only.
	ImageSize string
	// ImageURLs makes the task an edit of 1 to 10 public http(s) images.
	ImageURLs []string
	// OutputFormat is the result files' format: FormatPNG (the default),
	// FormatJPEG or FormatWebP.
	OutputFormat string
	// OutputQuality is the JPEG or WebP encoding's quality, 1 to 100 (0:
	// the server's default, 90); WebP at 100 is lossless.
	OutputQuality int
	// NumImages is how many images the task makes, 1 to 4 (0: 1); the
	// price is per image.
	NumImages int
	// CallbackURL receives the task's webhooks; CallbackEvents chooses
	// them (default: completed, failed and canceled).
	CallbackURL    string
	CallbackEvents []string
	// IdempotencyKey is sent as the Idempotency-Key header. When empty the
	// client makes one, so that its own retries of this call never create
	// a second task.
	IdempotencyKey string
}

// createBody is the wire form of a CreateRequest.
type createBody struct {
	Model          string      `json:"model"`
	TaskType       string      `json:"task_type"`
	Input          createInput `json:"input"`
	CallbackURL    string      `json:"callback_url,omitempty"`
	CallbackEvents []string    `json:"callback_events,omitempty"`
}

type createInput struct {
	Prompt        string   `json:"prompt"`
	AspectRatio   string   `json:"aspect_ratio,omitempty"`
	ImageSize     string   `json:"image_size,omitempty"`
	ImageURLs     []string `json:"image_urls,omitempty"`
	OutputFormat  string   `json:"output_format,omitempty"`
	OutputQuality int      `json:"output_quality,omitempty"`
	NumImages     int      `json:"num_images,omitempty"`
}

// Output formats, for CreateRequest.OutputFormat.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
	FormatWebP = "webp"
)

func (r CreateRequest) body() createBody {
	return createBody{
		Model:    r.Model,
		TaskType: "image",
		Input: createInput{
			Prompt:        r.Prompt,
			AspectRatio:   r.AspectRatio,
			ImageSize:     r.ImageSize,
			ImageURLs:     r.ImageURLs,
			OutputFormat:  r.OutputFormat,
			OutputQuality: r.OutputQuality,
			NumImages:     r.NumImages,
		},
		CallbackURL:    r.CallbackURL,
		CallbackEvents: r.CallbackEvents,
	}
}

// Task is the task record the API answers with (GET /v1/task/query, the
// list, the webhooks). It marshals back to the same JSON.
type Task struct {
	ID       string `json:"task_id"`
	Type     string `json:"task_type"`
	Model    string `json:"model"`
	Status   Status `json:"status"`
	Progress int    `json:"progress"` // 0 to 100
	// CreateTime, StartTime and CompleteTime are Unix milliseconds;
	// StartTime (when a worker began generating) is 0 until then,
	// CompleteTime until the task is final. See Created, Started and
	// Completed.
	CreateTime   int64 `json:"create_time"`
	StartTime    int64 `json:"start_time"`
	CompleteTime int64 `json:"complete_time"`
	// Results holds one signed URL per image a completed task made
	// (Input.NumImages, or fewer: those not made were refunded); download
	// them with Client.Download.
	Results []string `json:"results"`
	// Error is set on a failed task.
	Error *TaskError `json:"error,omitempty"`
	// Price is the credits charged at creation (per image × NumImages).
	Price int64 `json:"price"`
	// Input is what the task was asked, its defaults applied (nil from a
	// server that does not show it).
	Input *TaskInput `json:"input,omitempty"`
	// QueuePosition (1: next) and EtaMs (estimated milliseconds until a
	// worker starts it) are set only on a pending task's query, and EtaMs
	// only while there is an estimate.
	QueuePosition *int64 `json:"queue_position,omitempty"`
	EtaMs         *int64 `json:"eta_ms,omitempty"`
	// TraceID is the task's OpenTelemetry trace id (32 hex digits), set
	// only when the server traced it (tracing on, its create sampled).
	TraceID string `json:"trace_id,omitempty"`
}

// TaskInput is a task's input as its record shows it.
type TaskInput struct {
	Prompt string `json:"prompt"`
	// AspectRatio is empty for an edit that named none (its first source
	// image's nearest ratio).
	AspectRatio string   `json:"aspect_ratio,omitempty"`
	ImageSize   string   `json:"image_size,omitempty"` // pro models only
	ImageURLs   []string `json:"image_urls,omitempty"`
	// OutputFormat is png, jpeg or webp; OutputQuality is set for jpeg
	// and webp (webp at 100: lossless).
	OutputFormat  string `json:"output_format"`
	OutputQuality int    `json:"output_quality,omitempty"`
	NumImages     int    `json:"num_images"`
}

// Created is the task's creation time.
func (t *Task) Created() time.Time { return time.UnixMilli(t.CreateTime) }

// Started is when a worker began generating; zero before.
func (t *Task) Started() time.Time {
	if t.StartTime == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.StartTime)
}

// Completed is when the task became final; zero before.
func (t *Task) Completed() time.Time {
	if t.CompleteTime == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t.CompleteTime)
}

// ETA is the estimated wait until a worker starts a pending task; ok is
// false without an estimate.
func (t *Task) ETA() (d time.Duration, ok bool) {
	if t.EtaMs == nil {
		return 0, false
	}
	return time.Duration(*t.EtaMs) * time.Millisecond, true
}

// TaskError is why a task failed: a code (content_blocked, timeout, ...;
// see the failure codes in docs/api.md) and a message.
type TaskError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *TaskError) Error() string { return e.Code + ": " + e.Message }

// CancelResult is the answer to a cancel. A pending task is refunded in
// full; one a worker had started is not (the generation was already paid
// for upstream).
type CancelResult struct {
	TaskID          string `json:"task_id"`
	Status          Status `json:"status"`
	Refunded        bool   `json:"refunded"`
	CreditsRefunded int64  `json:"credits_refunded"`
}

// ListOptions filters a list of the account's tasks of the last 24 hours.
// Zero values are left out.
type ListOptions struct {
	Status Status
	Model  string
	Limit  int    // 1 to 100; the server's default is 20
	Cursor string // a page's NextCursor
}

// TaskPage is one page of a list, newest first. A page may hold fewer than
// Limit tasks while NextCursor is set; NextCursor is empty on the last.
type TaskPage struct {
	Tasks      []Task `json:"tasks"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Upload is an image stored for CreateRequest.ImageURLs (Client.Upload).
type Upload struct {
	// URL is a signed URL of the API for the image, valid until
	// ExpiresAt (24 hours): pass it in CreateRequest.ImageURLs.
	URL string `json:"url"`
	// ExpiresAt is Unix seconds; see Expires.
	ExpiresAt int64 `json:"expires_at"`
	// ContentType is the image's type as the server read it from its
	// bytes: image/png, image/jpeg, image/webp or image/gif.
	ContentType string `json:"content_type"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// Expires is when the upload's URL stops working.
func (u *Upload) Expires() time.Time { return time.Unix(u.ExpiresAt, 0) }
