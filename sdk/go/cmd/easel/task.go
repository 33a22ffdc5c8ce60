package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	easel "github.com/easelhq/easel/sdk/go"
)

func (a *app) getCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get TASK_ID",
		Short: "Show a task: status, progress, results or error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			t, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return a.printJSON(t)
			}
			a.printTask(t)
			return nil
		},
	}
}

func (a *app) listCmd(g *globals) *cobra.Command {
	var (
		o   easel.ListOptions
		st  string
		all bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the account's tasks of the last 24 hours, newest first",
		Example: `  easel task list --status processing
  easel task list --all --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			if o.Model != "" {
				if o.Model, err = a.model(g, o.Model); err != nil {
					return err
				}
			}
			o.Status = easel.Status(st)
			page := &easel.TaskPage{Tasks: []easel.Task{}}
			if all {
				for t, err := range c.Tasks(cmd.Context(), o) {
					if err != nil {
						return err
					}
					page.Tasks = append(page.Tasks, *t)
				}
			} else if page, err = c.List(cmd.Context(), o); err != nil {
				return err
			}
			if g.json {
				return a.printJSON(page)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tSTATUS\tPROGRESS\tMODEL\tCREATED")
			for _, t := range page.Tasks {
				fmt.Fprintf(tw, "%s\t%s\t%d%%\t%s\t%s\n", t.ID, t.Status, t.Progress, t.Model, t.Created().Local().Format(time.DateTime))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(a.stdout, "more: easel task list --cursor %s (or --all)\n", page.NextCursor)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&st, "status", "", "only tasks in this status: pending, processing, completed, failed, canceled")
	f.StringVarP(&o.Model, "model", "m", "", "only tasks of this model: standard, pro, or a model id")
	f.IntVar(&o.Limit, "limit", 0, "tasks per page, 1 to 100 (default 20)")
	f.StringVar(&o.Cursor, "cursor", "", "the page after this cursor (printed under a page)")
	f.BoolVar(&all, "all", false, "every page")
	return cmd
}

func (a *app) cancelCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Cancel a pending or processing task (a pending one is refunded in full)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			res, err := c.Cancel(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return a.printJSON(res)
			}
			refund := "not refunded: a worker had started it"
			if res.Refunded {
				refund = fmt.Sprintf("refunded %d credits", res.CreditsRefunded)
			}
			fmt.Fprintf(a.stdout, "canceled %s (%s)\n", res.TaskID, refund)
			return nil
		},
	}
}

func (a *app) waitCmd(g *globals) *cobra.Command {
	var (
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait TASK_ID",
		Short: "Wait for a task to end, showing its progress; with -o, download its image",
		Long: `wait follows a task until it completes, fails or is canceled, with the same
progress display as generate, then shows it (or, with -o, downloads its image).
It exits 1 when the task failed or was canceled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return a.follow(ctx, g, c, args[0], output, false)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "download the image to this file (or directory)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up waiting after this long")
	return cmd
}
