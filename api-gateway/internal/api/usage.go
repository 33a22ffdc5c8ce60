package api

import (
	"context"
	"encoding/csv"
	"net/http"
	"slices"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/api-gateway/internal/web"
	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// UsageReader reads an account's daily usage (store.Accounts).
type UsageReader interface {
	Usage(ctx context.Context, accountID string, days int) ([]account.UsageDay, error)
}

// Usage paths.
const (
	PathUsage    = "/v1/account/usage"
	PathUsageCSV = "/v1/account/usage.csv"
)

// usageDefaultDays is how many days a usage request without days covers.
const usageDefaultDays = 30

// usageOf reads the account's usage of the days asked for (days=, default
// 30), only that of the key asked for (key=, a visible prefix) if any, and
// every key seen in those days, sorted.
func (h *Handlers) usageOf(c echo.Context) ([]account.UsageDay, []string, error) {
	if h.Usage == nil {
		return nil, nil, apperr.New(apperr.Unavailable, "usage is not available")
	}
	days := usageDefaultDays
	if s := c.QueryParam("days"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > h.UsageDays {
			return nil, nil, apperr.Errorf(apperr.Invalid, "days must be 1 to %d", h.UsageDays)
		}
		days = n
	}
	list, err := h.Usage.Usage(c.Request().Context(), web.AccountOf(c).ID, days)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	keys := []string{}
	for _, d := range list {
		for k := range d.Keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	if key := c.QueryParam("key"); key != "" {
		for i, d := range list {
			only := map[string]map[string]account.Usage{}
			models := map[string]account.Usage{}
			if m, ok := d.Keys[key]; ok {
				only[key], models = m, m
			}
			list[i].Models, list[i].Keys = models, only
		}
	}
	return list, keys, nil
}

// UsedModels are the models of days' usage, sorted.
func UsedModels(days ...account.UsageDay) []string {
	models := []string{}
	for _, d := range days {
		for m := range d.Models {
			if !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
	}
	slices.Sort(models)
	return models
}

// AccountUsage handles GET /v1/account/usage?days=&key=: the account's
// usage by day, model and API key, oldest day first.
func (h *Handlers) AccountUsage(c echo.Context) error {
	list, keys, err := h.usageOf(c)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return web.OK(c, map[string]any{"days": list, "models": UsedModels(list...), "keys": keys})
}

// AccountUsageCSV handles GET /v1/account/usage.csv?days=&key=: the usage
// as CSV, a row per day, model and key (date, model, key, tasks, credits,
// refunds, refunded_credits); key is empty for the tasks made without an
// API key (the console's), so the rows of a day and model add up to its
// total.
func (h *Handlers) AccountUsageCSV(c echo.Context) error {
	list, _, err := h.usageOf(c)
	if err != nil {
		return err
	}
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	hdr.Set(echo.HeaderContentDisposition, `attachment; filename="easel-usage.csv"`)
	hdr.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	_ = w.Write([]string{"date", "model", "key", "tasks", "credits", "refunds", "refunded_credits"})
	row := func(date, model, key string, u account.Usage) {
		_ = w.Write([]string{date, model, key, strconv.FormatInt(u.Tasks, 10), strconv.FormatInt(u.Credits, 10),
			strconv.FormatInt(u.Refunds, 10), strconv.FormatInt(u.RefundedCredits, 10)})
	}
	filtered := c.QueryParam("key") != ""
	for _, d := range list {
		keys := make([]string, 0, len(d.Keys))
		for k := range d.Keys {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, m := range UsedModels(d) {
			rest := d.Models[m]
			for _, k := range keys {
				u, ok := d.Keys[k][m]
				if !ok {
					continue
				}
				row(d.Date, m, k, u)
				rest.Tasks -= u.Tasks
				rest.Credits -= u.Credits
				rest.Refunds -= u.Refunds
				rest.RefundedCredits -= u.RefundedCredits
			}
			if !filtered && (rest.Tasks > 0 || rest.Credits > 0 || rest.Refunds > 0) {
				row(d.Date, m, "", rest)
			}
		}
	}
	w.Flush()
	return w.Error()
}
