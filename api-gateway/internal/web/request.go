package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/createreq"
	"github.com/easelhq/easel/pkg/apperr"
)

// JSONBody checks a request carries JSON and reads its body, within the
// size limit.
func JSONBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	if err := createreq.CheckContentType(r.Header.Get(echo.HeaderContentType)); err != nil {
		return nil, err
	}
	return createreq.ReadBody(r.Body, r.ContentLength)
}

// Bind decodes a JSON body strictly: unknown fields are refused, since an
// operator's typo should not silently do nothing.
func Bind(c echo.Context, v any) error {
	body, err := JSONBody(c)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return apperr.Errorf(apperr.Invalid, "%s has the wrong type", te.Field)
		case errors.Is(err, io.EOF):
			return apperr.New(apperr.Invalid, "request body is empty: send a JSON object")
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return apperr.Errorf(apperr.Invalid, "%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return apperr.New(apperr.Invalid, "request body is not valid JSON")
	}
	return nil
}

// LimitParam reads a listing's limit query parameter: def when it is
// absent, else a whole number from 1 to most.
func LimitParam(c echo.Context, def, most int64) (int64, error) {
	s := c.QueryParam("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > most {
		return 0, apperr.Errorf(apperr.Invalid, "limit must be 1 to %d", most)
	}
	return n, nil
}
