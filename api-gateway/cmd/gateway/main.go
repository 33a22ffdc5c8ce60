// Command gateway serves Easel's public API. Configuration comes from
// EASEL_* environment variables (see README.md).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/redisconn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := config.LoadGateway(nil)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat, "gateway")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	redisconn.LogTo(log)
	return gateway.Run(ctx, cfg, log, nil)
}
