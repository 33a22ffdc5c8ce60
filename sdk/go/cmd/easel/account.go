package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	easel "github.com/easelhq/easel/sdk/go"
)

// webhookCmd groups the commands of the account's default webhook
// endpoint: where the events of its tasks created without a callback URL go.
func (a *app) webhookCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "The account's default webhook endpoint: get, set, delete, test",
		Long: `The account's default webhook endpoint is where the events of its tasks
created without a callback URL are POSTed.`,
	}
	cmd.AddCommand(a.webhookGetCmd(g), a.webhookSetCmd(g), a.webhookDeleteCmd(g), a.webhookTestCmd(g))
	return cmd
}

func (a *app) webhookGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Show the endpoint and the events sent to it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			e, err := c.AccountWebhook(cmd.Context())
			if err != nil {
				return err
			}
			return a.printEndpoint(g, e)
		},
	}
}

func (a *app) webhookSetCmd(g *globals) *cobra.Command {
	var events []string
	cmd := &cobra.Command{
		Use:   "set URL",
		Short: "Set the endpoint (and the events sent to it)",
		Example: `  easel webhook set https://hooks.example.com/easel
  easel webhook set https://hooks.example.com/easel --events task.completed,task.progress`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("events") {
				events = nil // the server's default: the final events
			}
			e, err := c.SetAccountWebhook(cmd.Context(), args[0], events)
			if err != nil {
				return err
			}
			return a.printEndpoint(g, e)
		},
	}
	cmd.Flags().StringSliceVar(&events, "events", nil, "the events sent, comma-separated: task.completed, task.failed, task.canceled, task.progress (default the first three)")
	return cmd
}

func (a *app) webhookDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete",
		Short: "Clear the endpoint: tasks without a callback URL send no events",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			if err := c.DeleteAccountWebhook(cmd.Context()); err != nil {
				return err
			}
			if g.json {
				// The endpoint as it is now: none.
				return a.printJSON(easel.WebhookEndpoint{Events: []string{}})
			}
			fmt.Fprintln(a.stdout, "deleted the webhook endpoint")
			return nil
		},
	}
}

func (a *app) webhookTestCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "test",
		Short: "Send the endpoint one signed webhook.test event now",
		Long: `test sends the endpoint one webhook.test event, signed as every delivery,
and shows the receiver's answer. It exits 1 when the event was not delivered
(an answer other than 2xx, or none).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			s, err := c.TestAccountWebhook(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				err = a.printJSON(s)
			} else {
				state, answer := "delivered", "no answer"
				if !s.Delivered {
					state = "not delivered"
				}
				if s.StatusCode != 0 {
					answer = fmt.Sprintf("HTTP %d", s.StatusCode)
				}
				fmt.Fprintf(a.stdout, "%s  %s  %s  %dms\n", s.WebhookID, state, answer, s.LatencyMs)
			}
			if err == nil && !s.Delivered {
				err = fmt.Errorf("the test event was not delivered: %s", firstOf(s.Error, "the receiver did not accept it"))
			}
			return err
		},
	}
}

// printEndpoint writes the account's webhook endpoint.
func (a *app) printEndpoint(g *globals, e *easel.WebhookEndpoint) error {
	if g.json {
		return a.printJSON(e)
	}
	if e.URL == "" {
		fmt.Fprintln(a.stdout, "no webhook endpoint (easel webhook set URL sets one)")
		return nil
	}
	fmt.Fprintf(a.stdout, "endpoint  %s\n", e.URL)
	fmt.Fprintf(a.stdout, "events    %s\n", strings.Join(e.Events, ", "))
	return nil
}

func (a *app) usageCmd(g *globals) *cobra.Command {
	var (
		o   easel.UsageOptions
		csv bool
	)
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show the account's tasks and credits by day, model and API key",
		Long: `usage shows the account's charged tasks and credits on each of the last
--days UTC days, today included, by model, then by API key; refunded tasks
are counted apart. --csv writes the CSV the API serves (a row per day, model
and key), --json its JSON.`,
		Example: `  easel usage --days 7
  easel usage --key esk_AbCd1234 --csv > usage.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if csv && g.json {
				return errors.New("--csv and --json: choose one")
			}
			c, err := a.client(g)
			if err != nil {
				return err
			}
			if csv {
				return c.UsageCSV(cmd.Context(), o, a.stdout)
			}
			u, err := c.Usage(cmd.Context(), o)
			if err != nil {
				return err
			}
			if g.json {
				return a.printJSON(u)
			}
			return printUsage(a.stdout, u)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Days, "days", 0, "the last this many UTC days, today included: 1 to 31 (default 30)")
	f.StringVar(&o.Key, "key", "", "only the usage of this API key, by its visible prefix (esk_AbCd1234)")
	f.BoolVar(&csv, "csv", false, "write the usage as CSV: date,model,key,tasks,credits,refunds,refunded_credits")
	return cmd
}

// printUsage writes usage as text: a row per day and model with their
// total, then each key's total over the days.
func printUsage(w io.Writer, u *easel.Usage) error {
	var total easel.UsageCount
	byKey := map[string]easel.UsageCount{}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATE\tMODEL\tTASKS\tCREDITS\tREFUNDS\tREFUNDED CREDITS")
	rows := 0
	for _, d := range u.Days {
		for _, m := range u.Models {
			if n, ok := d.Models[m]; ok {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Date, m, countCells(n))
				total = addCount(total, n)
				rows++
			}
		}
		for k, models := range d.Keys {
			for _, n := range models {
				byKey[k] = addCount(byKey[k], n)
			}
		}
	}
	if rows == 0 {
		if len(u.Days) == 0 {
			_, err := fmt.Fprintln(w, "no usage")
			return err
		}
		_, err := fmt.Fprintf(w, "no usage from %s to %s\n", u.Days[0].Date, u.Days[len(u.Days)-1].Date)
		return err
	}
	fmt.Fprintf(tw, "total\t\t%s\n", countCells(total))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(byKey) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTASKS\tCREDITS\tREFUNDS\tREFUNDED CREDITS")
	for _, k := range u.Keys {
		if n, ok := byKey[k]; ok {
			fmt.Fprintf(tw, "%s\t%s\n", k, countCells(n))
		}
	}
	return tw.Flush()
}

// countCells is a usage figure's cells of a row.
func countCells(n easel.UsageCount) string {
	return fmt.Sprintf("%d\t%d\t%d\t%d", n.Tasks, n.Credits, n.Refunds, n.RefundedCredits)
}

func addCount(a, b easel.UsageCount) easel.UsageCount {
	return easel.UsageCount{Tasks: a.Tasks + b.Tasks, Credits: a.Credits + b.Credits, Refunds: a.Refunds + b.Refunds, RefundedCredits: a.RefundedCredits + b.RefundedCredits}
}
