// Command worker runs Easel image jobs from the queues. Configuration comes
// from EASEL_* environment variables (see README.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := config.LoadWorker(nil)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat, "worker")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	redisconn.LogTo(log)
	return worker.Run(ctx, cfg, log, worker.Options{})
}
