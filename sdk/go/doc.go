// Package easel is the Go client of Easel, the asynchronous image-generation
// task service: create a task, follow it to its end, download its images.
//
//	c, err := easel.New("http://127.0.0.1:8080", os.Getenv("EASEL_API_KEY"))
//	if err != nil { ... }
//	task, err := c.Generate(ctx, easel.CreateRequest{
//		Model:       easel.ModelPro,
//		Prompt:      "a lighthouse at dusk",
//		AspectRatio: "16:9",
//		ImageSize:   "2K",
//	}, easel.OnUpdate(func(t *easel.Task) { log.Printf("%s %d%%", t.Status, t.Progress) }))
//	if err != nil { ... }
//	if task.Status != easel.StatusCompleted { return task.Error }
//	f, _ := os.Create("lighthouse.png")
//	_, err = c.Download(ctx, task.Results[0], f)
//
// # Calls
//
// Every method takes a context, which bounds the whole call, its retries
// and waits included.
//
//   - Create (POST /v1/task/create) returns a task id; Generate creates and
//     waits.
//   - Get (GET /v1/task/query) returns a task's record.
//   - Wait follows a task until it is final. It long-polls
//     (GET /v1/task/query?wait=N), so every change of status or progress
//     arrives as it happens (OnUpdate); against a server without long-polls
//     (one that answers the wait parameter 400) it polls, backing off while
//     nothing changes.
//   - Cancel (POST /v1/task/cancel) cancels a pending or processing task.
//   - List (GET /v1/task/list) returns a page of the account's tasks of the
//     last 24 hours; Tasks iterates over every page.
//   - Download writes a result image; result URLs are signed, so no key is
//     sent with them.
//
// # Errors
//
// An error the API answers is an *APIError with the HTTP status and the
// body's code and message; errors.Is matches it against ErrNotFound,
// ErrUnauthorized, ErrInsufficientCredits and the other Err* values. A task
// that failed is not an error of Wait: its record carries a *TaskError.
//
// # Retries
//
// A call answered 429 or 503 is tried again after the server's
// Retry-After (or a backoff of 0.5 s doubling, with jitter, when it names
// none), up to WithRetries times (default 4), unless the wait is longer
// than WithMaxRetryWait (default 30 s). Reads are also tried again after a
// network error, and so are creates: each create carries an
// Idempotency-Key (the request's own, or one the client makes), so a
// repeat answers the first task instead of making a second. A create
// answered 504 (the server could not tell whether it made the task) is
// tried again after its Retry-After, when the outcome is settled; out of
// retries, the *APIError's TaskID names the task that may exist.
//
// # The module
//
// This package is a Go module of its own, github.com/easelhq/easel/sdk/go,
// and imports nothing but the standard library, so using it brings in none
// of the server's dependencies (Echo, Asynq, the AWS SDK). The module's
// other requirements (cobra, a progress bar) are those of the easel command,
// cmd/easel, which is built on this package.
package easel
