// Command worker runs Easel image jobs from the queues. Configuration comes
// from EASEL_* environment variables (see docs/configuration.md).
package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/service"
	"github.com/easelhq/easel/worker"
)

func main() { service.Main("worker", run) }

func run(ctx context.Context) error {
	return service.Start(ctx, "worker", worker.LoadConfig, func(ctx context.Context, cfg worker.Config, log *zap.Logger) error {
		return worker.Run(ctx, cfg, log, worker.Options{})
	})
}
