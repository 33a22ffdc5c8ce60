package api

import (
	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/pkg/apperr"
)

// webhooks handles GET /v1/task/webhooks?task_id=: a task's webhook
// deliveries and their attempts.
func (h *handlers) webhooks(c echo.Context) error {
	return apperr.New(apperr.NotFound, "not built yet")
}

// WebhookLog reads the record of a task's webhook deliveries.
type WebhookLog interface{}
