package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/redisconn"
)

// Envelope is the body of every error response, and of the successes of
// create, cancel and the admin and console APIs.
type Envelope struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data any    `json:"data"`
}

// outcomeUnknown is the data of a 504: a create whose outcome is not known
// yet (apperr.OutcomeUnknownError).
type outcomeUnknown struct {
	TaskID  string `json:"task_id"`
	Outcome string `json:"outcome"`
	// SettledAt: from then on (Unix ms) the create can no longer apply, and
	// a query of TaskID tells whether it was made.
	SettledAt int64 `json:"settled_at"`
}

// statusOf maps application error codes to HTTP statuses: the one place that
// does.
func statusOf(code apperr.Code) int {
	switch code {
	case apperr.Invalid:
		return http.StatusBadRequest
	case apperr.Unauthenticated:
		return http.StatusUnauthorized
	case apperr.InsufficientCredits:
		return http.StatusPaymentRequired
	case apperr.Forbidden:
		return http.StatusForbidden
	case apperr.NotFound:
		return http.StatusNotFound
	case apperr.Conflict:
		return http.StatusConflict
	case apperr.Mismatch:
		return http.StatusUnprocessableEntity
	case apperr.Expired:
		return http.StatusGone
	case apperr.TooLarge:
		return http.StatusRequestEntityTooLarge
	case apperr.UnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case apperr.LimitExceeded:
		return http.StatusTooManyRequests
	case apperr.Unavailable:
		return http.StatusServiceUnavailable
	case apperr.OutcomeUnknown:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// messages for errors Echo raises itself (no route, wrong method, ...).
var echoMessages = map[int]string{
	http.StatusNotFound:         "no such endpoint",
	http.StatusMethodNotAllowed: "method not allowed on this endpoint",
}

// message writes what a client reads for err: the one place that does for
// the typed domain errors, which carry details but no text.
func message(err error) string {
	var (
		credits  *apperr.InsufficientCreditsError
		spend    *apperr.SpendLimitError
		inflight *apperr.InflightLimitError
		model    *apperr.ModelNotAllowedError
		notFound *apperr.NotFoundError
		unknown  *apperr.OutcomeUnknownError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("the task store stopped answering: task %s may have been created. Query it after %s: found, it was created and charged; not found, it was not. Or retry with the same Idempotency-Key",
			unknown.TaskID, unknown.SettledBy.UTC().Format(time.RFC3339))
	case errors.As(err, &spend):
		return fmt.Sprintf("API key spend limit reached: the key may spend %d credits, it has spent %d and this task costs %d", spend.Limit, spend.Spent, spend.Price)
	case errors.As(err, &credits):
		return fmt.Sprintf("insufficient credits: this task costs %d credits and the balance is %d", credits.Price, credits.Balance)
	case errors.As(err, &inflight):
		return fmt.Sprintf("too many tasks in flight: this account may have %d tasks pending or processing at once; wait for some to finish", inflight.Limit)
	case errors.As(err, &model):
		return "this account may not use model " + model.Model
	case errors.As(err, &notFound):
		return notFound.Error()
	case errors.Is(err, apperr.ErrUnknownKey):
		return "invalid API key"
	case errors.Is(err, apperr.ErrKeyRevoked):
		return "this API key has been revoked"
	case errors.Is(err, apperr.ErrAccountDisabled):
		return "this account is disabled"
	}
	if e, ok := apperr.As(err); ok && e.Message != "" {
		return e.Message
	}
	switch apperr.CodeOf(err) {
	case apperr.Unavailable:
		return "the service is unavailable, try again"
	case apperr.Internal:
		return "internal error"
	}
	return strings.ToLower(http.StatusText(statusOf(apperr.CodeOf(err))))
}

// Classify returns the status and client-safe message for err.
func Classify(err error) (int, string) {
	var c apperr.Coded
	if errors.As(err, &c) {
		return statusOf(c.ErrorCode()), message(err)
	}
	if dependencyFailed(err) {
		return http.StatusServiceUnavailable, "the service is busy, try again"
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		if msg, ok := echoMessages[he.Code]; ok {
			return he.Code, msg
		}
		if he.Code >= 400 && he.Code < 500 {
			return he.Code, http.StatusText(he.Code)
		}
		return http.StatusInternalServerError, "internal error"
	}
	return http.StatusInternalServerError, "internal error"
}

// dependencyFailed: an error no layer coded that says a dependency did
// not answer in time or at all (a deadline, a network error, Redis's
// full pool or a reply not awaited). It is the service saturated or a
// dependency down, never a bug: 503 with Retry-After, not 500.
func dependencyFailed(err error) bool { return redisconn.Down(err) }

// logged marks an error already logged where it happened (once per burst,
// say): the error handler logs it at debug only.
type logged struct{ error }

func (l logged) Unwrap() error { return l.error }

// Logged marks err as logged where it happened: the error handler logs it
// at debug only.
func Logged(err error) error { return logged{err} }

// OK answers a success in the envelope: {"code": 200, "msg": "success",
// "data": data}.
func OK(c echo.Context, data any) error {
	return c.JSON(http.StatusOK, Envelope{Code: http.StatusOK, Msg: "success", Data: data})
}

// handleError is Echo's HTTPErrorHandler: every error becomes the JSON
// envelope; details go to the log only.
func handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, msg := Classify(err)
	log := logging.From(c.Request().Context())
	switch {
	case errors.As(err, new(logged)):
		log.Debug("request failed", zap.Int("status", status), zap.Error(err))
	case status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		// A dependency is down: the operator's attention, not a bug.
		log.Warn("request failed: unavailable", zap.Int("status", status), zap.Error(err))
	case status >= 500:
		log.Error("request failed", zap.Int("status", status), zap.Error(err))
	default:
		log.Debug("request refused", zap.Int("status", status), zap.String("reason", msg))
	}
	h := c.Response().Header()
	if status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="easel"`)
	}
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	var data any
	var unknown *apperr.OutcomeUnknownError
	if errors.As(err, &unknown) {
		// The task that may exist, and when a query of it tells.
		wait := max(CeilSeconds(time.Until(unknown.SettledBy)), 1)
		h.Set("Retry-After", strconv.Itoa(wait))
		data = outcomeUnknown{TaskID: unknown.TaskID, Outcome: "unknown", SettledAt: unknown.SettledBy.UnixMilli()}
	}
	h.Set("Cache-Control", "no-store")
	var werr error
	if c.Request().Method == http.MethodHead {
		// The headers a GET would get, without the body.
		h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		werr = c.NoContent(status)
	} else {
		werr = c.JSON(status, Envelope{Code: status, Msg: msg, Data: data})
	}
	if werr != nil {
		log.Debug("could not write error response", zap.Error(werr))
	}
}
