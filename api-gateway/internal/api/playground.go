package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// playground handles GET /playground: a page that calls the public API.
func (h *handlers) playground(c echo.Context) error {
	return c.NoContent(http.StatusNotFound)
}
