package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/apperr"
)

// UsageDays is how many days an account's daily usage is kept after the
// day ends: the console's 30 days, and one more.
const UsageDays = 31

// Usage returns an account's usage on each of the last days UTC days,
// today included, oldest first; a day without tasks has no models. It
// reads one small hash a day, whatever the number of tasks.
func (s *Accounts) Usage(ctx context.Context, accountID string, days int) ([]account.UsageDay, error) {
	if days < 1 || days > UsageDays {
		return nil, apperr.Errorf(apperr.Invalid, "days must be 1 to %d", UsageDays)
	}
	today := dayOf(s.db.now().UnixMilli())
	cmds := make([]*redis.MapStringStringCmd, days)
	if _, err := s.db.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range days {
			cmds[i] = p.HGetAll(ctx, usageKey(accountID, today-int64(days-1-i)))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("store: usage: %w", err)
	}
	out := make([]account.UsageDay, days)
	for i, cmd := range cmds {
		day := today - int64(days-1-i)
		d := account.UsageDay{Date: time.UnixMilli(day * 86_400_000).UTC().Format(time.DateOnly), Models: map[string]account.Usage{}}
		for f, v := range cmd.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			if model, ok := strings.CutSuffix(f, usageTasks); ok {
				u := d.Models[model]
				u.Tasks = n
				d.Models[model] = u
			} else if model, ok := strings.CutSuffix(f, usageCredits); ok {
				u := d.Models[model]
				u.Credits = n
				d.Models[model] = u
			}
		}
		for m, u := range d.Models {
			if u.Tasks <= 0 && u.Credits <= 0 {
				delete(d.Models, m) // every task of the model refunded
			}
		}
		out[i] = d
	}
	return out, nil
}
