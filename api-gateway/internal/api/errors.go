package api

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/logging"
)

// envelope is the body of every error response, and of create's success.
type envelope struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data any    `json:"data"`
}

// statusOf maps application error codes to HTTP statuses: the one place that
// does.
func statusOf(code apperr.Code) int {
	switch code {
	case apperr.Invalid:
		return http.StatusBadRequest
	case apperr.Unauthenticated:
		return http.StatusUnauthorized
	case apperr.PaymentRequired:
		return http.StatusPaymentRequired
	case apperr.PermissionDenied:
		return http.StatusForbidden
	case apperr.NotFound:
		return http.StatusNotFound
	case apperr.Gone:
		return http.StatusGone
	case apperr.TooLarge:
		return http.StatusRequestEntityTooLarge
	case apperr.UnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case apperr.RateLimited:
		return http.StatusTooManyRequests
	case apperr.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// messages for errors Echo raises itself (no route, wrong method, ...).
var echoMessages = map[int]string{
	http.StatusNotFound:         "no such endpoint",
	http.StatusMethodNotAllowed: "method not allowed on this endpoint",
}

// classify returns the status and client-safe message for err.
func classify(err error) (int, string) {
	if e, ok := apperr.As(err); ok {
		return statusOf(e.Code), apperr.MessageOf(e)
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

// handleError is Echo's HTTPErrorHandler: every error becomes the JSON
// envelope; details go to the log only.
func handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, msg := classify(err)
	log := logging.From(c.Request().Context())
	switch {
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
	h.Set("Cache-Control", "no-store")
	var werr error
	if c.Request().Method == http.MethodHead {
		werr = c.NoContent(status)
	} else {
		werr = c.JSON(status, envelope{Code: status, Msg: msg, Data: nil})
	}
	if werr != nil {
		log.Debug("could not write error response", zap.Error(werr))
	}
}
