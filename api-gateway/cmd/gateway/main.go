// Command gateway serves Easel's public API. Configuration comes from
// EASEL_* environment variables (see docs/configuration.md).
package main

import (
	"context"

	"go.uber.org/zap"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/service"
)

func main() { service.Main("gateway", run) }

func run(ctx context.Context) error {
	return service.Start(ctx, "gateway", gateway.LoadConfig, func(ctx context.Context, cfg gateway.Config, log *zap.Logger) error {
		return gateway.Run(ctx, cfg, log, nil)
	})
}
