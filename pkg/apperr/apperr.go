// Package apperr is Easel's one application error type, and the typed domain
// errors that carry details beside their code.
//
// Business code (the stores, the task service, the worker's processor)
// returns these; it never chooses an HTTP status and, for the typed errors,
// never writes the text a client reads. The gateway's error mapper is the one
// place that turns a code into a status and an error into a message. Anything
// internal (a Redis error, a stack of wrapped causes) goes in Err, which is
// logged but never shown.
//
// The codes a failed task ends with (content_blocked, timeout, ...) are
// declared with the task type, in package task.
package apperr

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an error. Codes name what went wrong in the domain; the
// gateway decides what each means over HTTP.
type Code string

// Codes of request-level errors.
const (
	// Invalid: the request or an operator's input breaks a rule.
	Invalid Code = "invalid"
	// Unauthenticated: no credential, or one that names nobody.
	Unauthenticated Code = "unauthenticated"
	// Forbidden: the caller is known but may not do this.
	Forbidden Code = "forbidden"
	// NotFound: no such thing, or not the caller's to see.
	NotFound Code = "not_found"
	// Conflict: the thing is in a state that does not allow the operation.
	Conflict Code = "conflict"
	// Mismatch: the request repeats an earlier one's identity (an
	// Idempotency-Key) with different content.
	Mismatch Code = "mismatch"
	// Expired: it existed but its time is up.
	Expired Code = "expired"
	// TooLarge: the input exceeds a size limit.
	TooLarge Code = "too_large"
	// UnsupportedMediaType: the input is not in a format we read.
	UnsupportedMediaType Code = "unsupported_media_type"
	// LimitExceeded: a rate or concurrency limit refuses the request for now.
	LimitExceeded Code = "limit_exceeded"
	// InsufficientCredits: the account cannot pay for the task.
	InsufficientCredits Code = "insufficient_credits"
	// Unavailable: a dependency (Redis, the queue) is down; try again.
	Unavailable Code = "unavailable"
	// OutcomeUnknown: a dependency stopped answering while a change was
	// under way, and whether it was made is not known yet.
	OutcomeUnknown Code = "outcome_unknown"
	// Internal: a bug or an unexpected failure.
	Internal Code = "internal"
)

// Coded is implemented by every error that carries a code: *Error and the
// typed domain errors below.
type Coded interface {
	error
	ErrorCode() Code
}

// Error is an application error.
type Error struct {
	Code Code
	// Message is safe to show to whoever made the request: a validation
	// message naming the field at fault, or a task-failure message for the
	// task's owner. Empty means "say what the code means".
	Message string
	// Err is the internal cause: logged, never shown.
	Err error
	// Retryable marks a transient failure (the operation may succeed if
	// tried again).
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

// ErrorCode implements Coded.
func (e *Error) ErrorCode() Code { return e.Code }

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an error with a message safe to show.
func New(code Code, msg string) *Error {
	return &Error{Code: code, Message: msg}
}

// Errorf returns an error whose safe message is formatted.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an error with a safe message and an internal cause.
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

// CodeOf returns the code of the first coded error in err's chain, Internal
// when there is none and "" for a nil error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var c Coded
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return Internal
}

// MessageOf returns the safe message of err's first *Error, or a generic one,
// so internal details never leak.
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

// NotFoundError: no Kind with this ID (or none the caller may see).
type NotFoundError struct {
	Kind string // "task", "account", "key", "file"
	ID   string // may be empty
	// By names what ID is when it is not the thing's id ("prefix").
	By string
}

func (e *NotFoundError) Error() string {
	switch {
	case e.By != "":
		return "no " + e.Kind + " with " + e.By + " " + e.ID
	case e.ID == "":
		return e.Kind + " not found"
	}
	return e.Kind + " " + e.ID + " not found"
}

// ErrorCode implements Coded.
func (e *NotFoundError) ErrorCode() Code { return NotFound }

// InsufficientCreditsError: the account's balance is below the task's price.
type InsufficientCreditsError struct {
	Price, Balance int64
}

func (e *InsufficientCreditsError) Error() string {
	return fmt.Sprintf("insufficient credits: price %d, balance %d", e.Price, e.Balance)
}

// ErrorCode implements Coded.
func (e *InsufficientCreditsError) ErrorCode() Code { return InsufficientCredits }

// InflightLimitError: the account already has Limit tasks pending or
// processing.
type InflightLimitError struct {
	Limit int64
}

func (e *InflightLimitError) Error() string {
	return fmt.Sprintf("in-flight limit %d reached", e.Limit)
}

// ErrorCode implements Coded.
func (e *InflightLimitError) ErrorCode() Code { return LimitExceeded }

// SpendLimitError is a create refused because the API key it came with
// would spend past its spend limit.
type SpendLimitError struct {
	Limit, Spent, Price int64
}

func (e *SpendLimitError) Error() string {
	return fmt.Sprintf("key spend limit %d reached: spent %d, price %d", e.Limit, e.Spent, e.Price)
}

// ErrorCode implements Coded.
func (e *SpendLimitError) ErrorCode() Code { return InsufficientCredits }

// ModelNotAllowedError: the account may not use Model.
type ModelNotAllowedError struct {
	Model string
}

func (e *ModelNotAllowedError) Error() string { return "model " + e.Model + " not allowed" }

// ErrorCode implements Coded.
func (e *ModelNotAllowedError) ErrorCode() Code { return Forbidden }

// OutcomeUnknownError: the task store stopped answering during the create
// of TaskID, and its undo could not be confirmed either: the task may
// exist. The create cannot take effect after SettledBy; from then on, a
// query of TaskID tells (found: created and charged; not found: not).
type OutcomeUnknownError struct {
	TaskID    string
	SettledBy time.Time
	Err       error
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("create of %s: outcome unknown until %s: %v", e.TaskID, e.SettledBy.Format(time.RFC3339Nano), e.Err)
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// ErrorCode implements Coded.
func (e *OutcomeUnknownError) ErrorCode() Code { return OutcomeUnknown }

// sentinel is a typed error with no details.
type sentinel struct {
	code Code
	text string
}

func (e *sentinel) Error() string        { return e.text }
func (e *sentinel) ErrorCode() Code      { return e.code }
func newSentinel(c Code, t string) error { return &sentinel{c, t} }

// Sentinel domain errors; compare with errors.Is.
var (
	// ErrUnknownKey: no active API key is stored under this credential.
	ErrUnknownKey = newSentinel(Unauthenticated, "unknown API key")
	// ErrKeyRevoked: the API key existed and was revoked.
	ErrKeyRevoked = newSentinel(Unauthenticated, "API key revoked")
	// ErrAccountDisabled: the account exists but is disabled.
	ErrAccountDisabled = newSentinel(Forbidden, "account disabled")
)
