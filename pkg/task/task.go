// Package task holds the task domain shared by the gateway and the workers:
// what a client asks for (Input, with its defaults), the task record, its
// statuses and results, and the codes a failed task ends with.
package task

import (
	"time"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
)

// Status is a task's state. Transitions: pending → processing → completed or
// failed; pending → failed (enqueue failure, deadline); pending or
// processing → canceled (its owner canceled it). completed, failed and
// canceled are final.
type Status string

// Statuses.
const (
	Pending    Status = "pending"
	Processing Status = "processing"
	Completed  Status = "completed"
	Failed     Status = "failed"
	Canceled   Status = "canceled"
)

// Statuses lists every status, in the order a task can pass through them.
var Statuses = []Status{Pending, Processing, Completed, Failed, Canceled}

// Final reports whether s is an end state.
func (s Status) Final() bool { return s == Completed || s == Failed || s == Canceled }

// Type is the task_type of every task Easel runs.
const Type = "image"

// Kinds of image task, chosen by the presence of input.image_urls.
const (
	KindTextToImage = "text-to-image"
	KindEdit        = "edit"
)

// ResultTTL is how long a finished task and its result URLs stay available.
const ResultTTL = 24 * time.Hour

// Codes a failed task ends with: its public "error.code".
const (
	ContentBlocked      apperr.Code = "content_blocked"
	InvalidSourceImage  apperr.Code = "invalid_source_image"
	SourceFetchFailed   apperr.Code = "source_fetch_failed"
	UpstreamUnavailable apperr.Code = "upstream_unavailable"
	Timeout             apperr.Code = "timeout"
	GenerationFailed    apperr.Code = "generation_failed"
	// WorkerCrashed: the task took down the worker running it twice, and
	// was not tried a third time.
	WorkerCrashed apperr.Code = "worker_crashed"
	// Internal (apperr.Internal) ends a task that failed for a reason of
	// ours; its message never says more than that.
)

// Idempotency makes a create idempotent (the Idempotency-Key header): Key
// as the client sent it, BodyHash a digest of the request's body.
type Idempotency struct {
	Key      string
	BodyHash string
}

// Input is what a client asks of an image task.
type Input struct {
	Model  catalog.Model
	Prompt string
	// AspectRatio is one of catalog.AspectRatios; "" for an edit that
	// named none (see OutputAspectRatio).
	AspectRatio string
	// ImageSize is "1K", "2K" or "4K" (the standard model makes 1K only).
	ImageSize string
	// ImageURLs are the source images; present means editing.
	ImageURLs []string
	// OutputFormat is the result files' format: FormatPNG, FormatJPEG or
	// FormatWebP.
	OutputFormat string
	// OutputQuality is the quality of a lossy format's encoding, 1 to 100
	// (DefaultQuality when the client named none); it applies to JPEG and
	// WebP (100: lossless WebP).
	OutputQuality int
	// NumImages is how many images the task makes, 1 to MaxImages; each
	// is priced.
	NumImages int
	// Callback, when its URL is set, is where the task's events are
	// delivered (webhooks).
	Callback Callback
}

// Webhook event types: the "type" of a delivery, and the values of a
// create's callback_events.
const (
	EventCompleted = "task.completed"
	EventFailed    = "task.failed"
	EventCanceled  = "task.canceled"
	EventProgress  = "task.progress"
)

// Events lists every event type; DefaultEvents are those delivered when a
// create names none: the task's end, whichever it is.
var (
	Events        = []string{EventCompleted, EventFailed, EventCanceled, EventProgress}
	DefaultEvents = []string{EventCompleted, EventFailed, EventCanceled}
)

// EventOf returns the event a task ending in status s is delivered as ("" for
// a status that is not final).
func EventOf(s Status) string {
	switch s {
	case Completed:
		return EventCompleted
	case Failed:
		return EventFailed
	case Canceled:
		return EventCanceled
	}
	return ""
}

// Callback is where and what a task's webhook deliveries go.
type Callback struct {
	// URL is an absolute http(s) URL; "" for no webhooks.
	URL string
	// Events are the event types to deliver (DefaultEvents when the client
	// named none).
	Events []string
}

// Wants reports whether the callback delivers events of type ev.
func (c Callback) Wants(ev string) bool {
	if c.URL == "" {
		return false
	}
	for _, e := range c.Events {
		if e == ev {
			return true
		}
	}
	return false
}

// Kind returns KindEdit or KindTextToImage.
func (in Input) Kind() string {
	if len(in.ImageURLs) > 0 {
		return KindEdit
	}
	return KindTextToImage
}

// Output formats: the values of input.output_format.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
	FormatWebP = "webp"
)

// Formats lists the output formats, the default first.
var Formats = []string{FormatPNG, FormatJPEG, FormatWebP}

// The bounds and defaults of input.output_quality and input.num_images.
const (
	MinQuality     = 1
	MaxQuality     = 100
	DefaultQuality = 90
	MaxImages      = 4
)

// NoteImagesNotMade is the note of the ledger's refund of the images a
// completed task was asked for and could not make.
const NoteImagesNotMade = "images_not_made"

// FormatMIME returns the media type of an output format ("" if f is none).
func FormatMIME(f string) string {
	switch f {
	case FormatPNG:
		return "image/png"
	case FormatJPEG:
		return "image/jpeg"
	case FormatWebP:
		return "image/webp"
	}
	return ""
}

// Lossy reports whether an output format's encoding takes a quality:
// JPEG and WebP (WebP at quality 100 is lossless).
func Lossy(f string) bool { return f == FormatJPEG || f == FormatWebP }

// WithDefaults returns in with what the client left out filled in: image size
// 1K, aspect ratio 1:1 for text-to-image, PNG, quality DefaultQuality for a
// lossy format, one image. An edit that names no ratio
// keeps "": its ratio follows its first source image, known only once the
// worker has fetched it (OutputAspectRatio). This and OutputAspectRatio are
// the only places defaults are decided.
func (in Input) WithDefaults() Input {
	if in.ImageSize == "" {
		in.ImageSize = catalog.Size1K
	}
	if in.AspectRatio == "" && len(in.ImageURLs) == 0 {
		in.AspectRatio = catalog.DefaultAspectRatio
	}
	if in.OutputFormat == "" {
		in.OutputFormat = FormatPNG
	}
	if in.OutputQuality == 0 && Lossy(in.OutputFormat) {
		in.OutputQuality = DefaultQuality
	}
	if in.NumImages == 0 {
		in.NumImages = 1
	}
	return in
}

// OutputAspectRatio returns the ratio to generate at: the one asked for, or,
// for an edit that named none, the supported ratio nearest its first source
// image (of firstWidth × firstHeight pixels).
func (in Input) OutputAspectRatio(firstWidth, firstHeight int) string {
	if in.AspectRatio != "" {
		return in.AspectRatio
	}
	return catalog.NearestAspectRatio(firstWidth, firstHeight)
}

// Result is one stored output image.
type Result struct {
	// Key is the blob-store key (see blob.ResultKey).
	Key string `json:"key"`
	// ContentType is the image's media type, e.g. "image/png".
	ContentType string `json:"type"`
	// Size is the length in bytes.
	Size int64 `json:"size"`
	// Width and Height are the pixel dimensions.
	Width  int `json:"w"`
	Height int `json:"h"`
}

// Failure is why a task failed: a stable machine-readable code and a message
// its owner can act on.
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
	// Price is what the task cost, in credits (its model's price per
	// image × Input.NumImages), debited at creation and refunded if the
	// task fails; a completed task's images not made are refunded.
	Price int64
	// Refunded is true once credits of the task have been given back: a
	// failed task's price, or the price of the images a completed one
	// could not make. Either happens once.
	Refunded bool
	// Input is what the task was asked, its defaults applied; nil when its
	// record keeps none.
	Input *Input
	// Callback is where the task's webhooks go (none when its URL is "").
	Callback Callback
	// Queue and QueueSeq are the queue a pending task waits in and its
	// sequence number there, for its queue position ("" and 0: none).
	Queue    string
	QueueSeq int64
	// TraceParent is the W3C traceparent of the span that created the
	// task, when tracing was on and sampled it; "" otherwise. The task's
	// later spans (its run, its webhooks) join that trace.
	TraceParent string
}

// ResultsExpire returns when the task's result URLs stop working.
func (t *Task) ResultsExpire() time.Time { return t.CompleteTime.Add(ResultTTL) }
