package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/upstream"
)

// The pool of upstream credentials (EASEL_UPSTREAMS_FILE) as the workers
// share it in Redis: each upstream's breaker, cooling, credential and
// recent errors. easelctl only reads it; the file is the pool's source.

// noPool is what upstream list says when no worker has published a pool.
const noPool = "no upstream pool: EASEL_UPSTREAMS_FILE is not set on the workers"

// recentErrorWidth clips the RECENT ERROR column (in characters).
const recentErrorWidth = 60

// redisClient returns a client of the Redis the store uses, made on first
// use and closed with the rest.
func (c *cli) redisClient(ctx context.Context) (redis.UniversalClient, error) {
	if err := c.open(ctx); err != nil {
		return nil, err
	}
	url := c.redisURL
	if url == "" {
		url = c.getenv("EASEL_REDIS_URL")
	}
	rdb, err := redisconn.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	prev := c.close
	c.close = func() {
		_ = rdb.Close()
		if prev != nil {
			prev()
		}
	}
	return rdb, nil
}

func (c *cli) upstreamCommands() *cobra.Command {
	cmd := &cobra.Command{Use: "upstream", Short: "Show the pool of upstream credentials (EASEL_UPSTREAMS_FILE) as the workers share it"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the pool's upstreams: breaker, cooling, disabled credential, calls and errors in the last 60 s and in all, the newest error; and the upstreams file's state: when the pool was loaded from it, the last change refused (times in UTC)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rdb, err := c.redisClient(cmd.Context())
			if err != nil {
				return err
			}
			all, err := upstream.Statuses(cmd.Context(), rdb)
			if err != nil {
				return err
			}
			if c.jsonOut {
				return c.printJSON(all)
			}
			if len(all) == 0 {
				fmt.Fprintln(c.out, noPool)
				return nil
			}
			file, err := upstream.ReadFileState(cmd.Context(), rdb)
			if err != nil {
				return err
			}
			writeFileState(c.out, file)
			return writeUpstreams(c.out, all)
		},
	}
	cmd.AddCommand(list)
	return cmd
}

// writeFileState writes the upstreams file's state above the table: the
// file the pool was loaded from and when, and a change refused since
// (the pool is still the one loaded). Nothing when no worker recorded it.
func writeFileState(out io.Writer, f *upstream.FileState) {
	if f == nil {
		return
	}
	fmt.Fprintf(out, "file %s: loaded at %s\n", f.Path, f.LoadedAt.UTC().Format(time.RFC3339))
	if f.RefusedAt != nil {
		reason := strings.Join(strings.Fields(f.Refusal), " ")
		fmt.Fprintf(out, "REFUSED at %s, the pool below is the one loaded before: %s\n", f.RefusedAt.UTC().Format(time.RFC3339), reason)
	}
}

// writeUpstreams writes the pool as a table.
func writeUpstreams(out io.Writer, all []upstream.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tPROVIDER\tWEIGHT\tMODELS\tBREAKER\tCOOLING\tDISABLED\tQUOTA\tCALLS 60S/ALL\tERRORS 60S\tERRORS ALL\tRECENT ERROR")
	for _, s := range all {
		models := "all"
		if len(s.Models) > 0 {
			models = strings.Join(s.Models, ",")
		}
		cooling := "-"
		if s.CoolingUntil != nil {
			cooling = "until " + clock(*s.CoolingUntil)
		}
		disabled := "no"
		if s.Disabled {
			disabled = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", s.Name, s.Provider, s.Weight, models, s.BreakerText, cooling, disabled,
			quotaText(s), s.CallsLastMinute, s.CallsTotal, errorsText(s.ErrorsLastMinute), errorsText(s.ErrorsTotal), recentError(s.RecentErrors))
	}
	return w.Flush()
}

// quotaText writes an upstream's quota and its use: "3/20 at once, 60 rpm";
// "-" without one.
func quotaText(s upstream.Status) string {
	var parts []string
	if s.Concurrency > 0 {
		n := int64(0)
		if s.InFlight != nil {
			n = *s.InFlight
		}
		parts = append(parts, fmt.Sprintf("%d/%d at once", n, s.Concurrency))
	}
	if s.RPM > 0 {
		parts = append(parts, fmt.Sprintf("%d rpm", s.RPM))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// clock writes a time of day in UTC: the pool's times are minutes ahead
// at most.
func clock(t time.Time) string { return t.UTC().Format("15:04:05") + "Z" }

// errorsText writes the errors by class, "failure=3 throttled=1"; "-" for
// none.
func errorsText(m map[string]int64) string {
	var parts []string
	for k, n := range m {
		if n > 0 {
			parts = append(parts, k+"="+strconv.FormatInt(n, 10))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// recentError writes the newest error, on one line, clipped.
func recentError(errs []upstream.ErrorRecord) string {
	if len(errs) == 0 {
		return "-"
	}
	e := errs[0]
	s := strings.Join(strings.Fields(e.Message), " ") // no tab or newline in the table
	if e.Outcome != "" {
		s = string(e.Outcome) + ": " + s
	}
	if r := []rune(s); len(r) > recentErrorWidth {
		s = string(r[:recentErrorWidth-3]) + "..."
	}
	return s
}
