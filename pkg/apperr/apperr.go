// Package apperr is Easel's one application error type.
//
// Business code returns *Error values carrying a Code and a message that is
// safe to show a client. Anything internal (a Redis error, a stack of wrapped
// causes) goes in Err, which is logged but never shown. The HTTP edge maps codes
// to status codes in one place; the worker copies task-failure codes into the
// task record.
package apperr

import (
	"errors"
	"fmt"
)

// Code classifies an error. Codes are stable strings: task-failure codes are
// part of the public API (the "error.code" of a failed task).
type Code string

// Request-level codes, returned to API clients with an HTTP status.
const (
	Invalid              Code = "invalid_request"        // 400
	Unauthenticated      Code = "unauthorized"           // 401
	PaymentRequired      Code = "payment_required"       // 402
	PermissionDenied     Code = "forbidden"              // 403
	NotFound             Code = "not_found"              // 404
	Gone                 Code = "gone"                   // 410
	TooLarge             Code = "request_too_large"      // 413
	UnsupportedMediaType Code = "unsupported_media_type" // 415
	RateLimited          Code = "rate_limited"           // 429
	Unavailable          Code = "unavailable"            // 503
	Internal             Code = "internal"               // 500
)

// Task-failure codes, stored in a failed task's "error.code".
const (
	ContentBlocked      Code = "content_blocked"
	InvalidSourceImage  Code = "invalid_source_image"
	SourceFetchFailed   Code = "source_fetch_failed"
	UpstreamUnavailable Code = "upstream_unavailable"
	Timeout             Code = "timeout"
	GenerationFailed    Code = "generation_failed"
)

// Error is an application error.
type Error struct {
	Code    Code
	Message string // safe to show to a client
	Err     error  // internal cause, never shown
	// Retryable marks a transient failure (a worker may try the task again).
	Retryable bool
}

// Error implements error. It includes the cause, for logs.
func (e *Error) Error() string {
	switch {
	case e.Err != nil && e.Message != "":
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Code, e.Err)
	default:
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
}

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error with a client-safe message.
func New(code Code, msg string) *Error {
	return &Error{Code: code, Message: msg}
}

// Errorf returns an error whose client-safe message is formatted.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with a client-safe message and an internal cause.
func Wrap(err error, code Code, msg string) *Error {
	return &Error{Code: code, Message: msg, Err: err}
}

// Transient returns a retryable error.
func Transient(err error, code Code, msg string) *Error {
	return &Error{Code: code, Message: msg, Err: err, Retryable: true}
}

// As returns the first *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// CodeOf returns the code of the first *Error in err's chain, Internal when
// there is none and "" for a nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	if e, ok := As(err); ok {
		return e.Code
	}
	return Internal
}

// MessageOf returns the client-safe message of err: the message of its first
// *Error, or a generic one for anything else, so internal details never leak.
func MessageOf(err error) string {
	if e, ok := As(err); ok && e.Message != "" {
		return e.Message
	}
	return "internal error"
}

// IsRetryable reports whether err is marked retryable.
func IsRetryable(err error) bool {
	e, ok := As(err)
	return ok && e.Retryable
}
