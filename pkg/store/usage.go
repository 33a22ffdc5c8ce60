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
// today included, oldest first, by model and by API key and model; a day
// without tasks has no models. It reads one small hash a day, whatever the
// number of tasks, and, when keys used any, the account's keys to name
// them by their visible prefix.
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
	// byTag: each day's usage of each key tag, by model.
	byTag := make([]map[string]map[string]account.Usage, days)
	keyed := false
	for i, cmd := range cmds {
		day := today - int64(days-1-i)
		d := account.UsageDay{Date: time.UnixMilli(day * 86_400_000).UTC().Format(time.DateOnly), Models: map[string]account.Usage{}, Keys: map[string]map[string]account.Usage{}}
		byTag[i] = map[string]map[string]account.Usage{}
		for f, v := range cmd.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			parts := strings.Split(f, "|")
			if len(parts) < 2 || len(parts) > 3 {
				continue
			}
			suffix := "|" + parts[len(parts)-1]
			if len(parts) == 2 {
				d.Models[parts[0]] = addUsage(d.Models[parts[0]], suffix, n)
				continue
			}
			keyed = true
			tag, model := parts[1], parts[0]
			if byTag[i][tag] == nil {
				byTag[i][tag] = map[string]account.Usage{}
			}
			byTag[i][tag][model] = addUsage(byTag[i][tag][model], suffix, n)
		}
		for m, u := range d.Models {
			if u.Tasks <= 0 && u.Credits <= 0 && u.Refunds <= 0 {
				delete(d.Models, m)
			}
		}
		out[i] = d
	}
	if !keyed {
		return out, nil
	}
	prefixes, err := s.keyTags(ctx, accountID)
	if err != nil {
		return nil, err
	}
	for i := range out {
		for tag, models := range byTag[i] {
			name, ok := prefixes[tag]
			if !ok {
				name = tag // a key no longer listed
			}
			out[i].Keys[name] = models
		}
	}
	return out, nil
}

// addUsage adds a usage field's value (by its suffix) to u.
func addUsage(u account.Usage, suffix string, n int64) account.Usage {
	switch suffix {
	case usageTasks:
		u.Tasks += n
	case usageCredits:
		u.Credits += n
	case usageRefunds:
		u.Refunds += n
	case usageRefundCredits:
		u.RefundedCredits += n
	}
	return u
}

// keyTags maps the tags of an account's keys in its usage (usageKeyTag
// hex digits of their hashes) to their visible prefixes.
func (s *Accounts) keyTags(ctx context.Context, accountID string) (map[string]string, error) {
	hashes, err := s.db.rdb.SMembers(ctx, accountKeysKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: usage keys: %w", err)
	}
	found, err := s.keysByHash(ctx, accountID, hashes)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(found))
	for _, k := range found {
		if len(k.hash) >= usageKeyTag {
			out[k.hash[:usageKeyTag]] = k.Prefix
		}
	}
	return out, nil
}
