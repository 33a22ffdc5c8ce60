package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// openapi handles GET /openapi.json: the OpenAPI document of the public API.
func (h *handlers) openapi(c echo.Context) error {
	return c.NoContent(http.StatusNotFound)
}
