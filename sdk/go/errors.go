package easel

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// APIError is an error answered by the API: its HTTP status and the code
// and message of its body ({"code":404,"msg":"...","data":null}).
//
// Match a kind of error with errors.Is and the Err* values, or read the
// fields with errors.As:
//
//	var apiErr *easel.APIError
//	if errors.As(err, &apiErr) { log.Print(apiErr.Code, apiErr.Message) }
//	if errors.Is(err, easel.ErrNotFound) { ... }
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the body's code (the HTTP status on every Easel server).
	Code int
	// Message is the body's msg: what to fix.
	Message string
	// RequestID is the X-Request-Id header, for the server's log.
	RequestID string
	// RetryAfter is the Retry-After header (429, 503, 504), zero without
	// one.
	RetryAfter time.Duration
	// TaskID is the task a create answered 504 may have made (its outcome
	// is unknown until RetryAfter has passed: then Get tells). Empty
	// otherwise.
	TaskID string
}

func (e *APIError) Error() string {
	return "easel: " + strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode) + ": " + e.Message
}

// Is matches the Err* values by HTTP status.
func (e *APIError) Is(target error) bool {
	s, ok := target.(statusError)
	return ok && int(s) == e.StatusCode
}

// statusError is a kind of APIError, by HTTP status.
type statusError int

func (s statusError) Error() string {
	return "easel: " + strconv.Itoa(int(s)) + " " + http.StatusText(int(s))
}

// Kinds of APIError, for errors.Is.
var (
	ErrBadRequest           error = statusError(http.StatusBadRequest)            // 400: an invalid request
	ErrUnauthorized         error = statusError(http.StatusUnauthorized)          // 401: a missing, unknown or revoked key
	ErrInsufficientCredits  error = statusError(http.StatusPaymentRequired)       // 402: not enough credits
	ErrForbidden            error = statusError(http.StatusForbidden)             // 403: a disabled account, a model not allowed
	ErrNotFound             error = statusError(http.StatusNotFound)              // 404: an unknown task, or another account's
	ErrConflict             error = statusError(http.StatusConflict)              // 409: a task already final; an Idempotency-Key in use
	ErrGone                 error = statusError(http.StatusGone)                  // 410: a result URL past its expiry
	ErrTooLarge             error = statusError(http.StatusRequestEntityTooLarge) // 413: a body, or an uploaded image, over its limit
	ErrUnsupportedMediaType error = statusError(http.StatusUnsupportedMediaType)  // 415: an upload that is not an image the API reads
	ErrRateLimited          error = statusError(http.StatusTooManyRequests)       // 429: over a rate limit or the day's upload bytes (after the client's retries)
	ErrUnavailable          error = statusError(http.StatusServiceUnavailable)    // 503: the service is unavailable (after the client's retries)
	ErrIdempotencyMismatch  error = statusError(http.StatusUnprocessableEntity)   // 422: an Idempotency-Key used with another body
	ErrOutcomeUnknown       error = statusError(http.StatusGatewayTimeout)        // 504: a create that may have been made (APIError.TaskID; after the client's retries)
)

// apiError reads an error response. A body that is not the API's own (a
// proxy's page) still makes an APIError, with the start of the body or the
// status text as its message.
func apiError(resp *http.Response, body []byte) *APIError {
	e := &APIError{
		StatusCode: resp.StatusCode,
		Code:       resp.StatusCode,
		RequestID:  resp.Header.Get("X-Request-Id"),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
	var env struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
		Data struct {
			TaskID string `json:"task_id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &env) == nil && env.Msg != "" {
		e.Message = env.Msg
		if env.Code != 0 {
			e.Code = env.Code
		}
		if resp.StatusCode == http.StatusGatewayTimeout {
			e.TaskID = env.Data.TaskID
		}
		return e
	}
	msg := strings.TrimSpace(string(bytes.ToValidUTF8(body, nil)))
	if utf8.RuneCountInString(msg) > 200 {
		msg = string([]rune(msg)[:200]) + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
