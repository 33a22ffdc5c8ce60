package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// noRedis marks a command that needs no Redis (commands' PersistentPreRunE
// connects for every other).
const noRedis = "no-redis"

// probeCommand is a container's health check where the image has no shell
// or curl (distroless): GET a URL, exit 0 on a 2xx answer within the
// timeout, 1 otherwise.
func (c *cli) probeCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:         "probe URL",
		Short:       "GET URL and exit 0 on a 2xx answer (a container's health check)",
		Args:        exactArgs(1),
		Annotations: map[string]string{noRedis: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
			if err != nil {
				return usageError{"URL: " + err.Error()}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				return fmt.Errorf("%s answered %s", args[0], resp.Status)
			}
			fmt.Fprintf(c.out, "%s %s\n", args[0], resp.Status)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
