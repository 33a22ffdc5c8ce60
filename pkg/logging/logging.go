// Package logging builds Easel's zap loggers and carries a request- or
// task-scoped logger in a context.
package logging

import (
	"context"
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Formats.
const (
	FormatJSON    = "json"
	FormatConsole = "console"
)

// New returns a logger writing to w at level ("debug", "info", "warn",
// "error") in format ("json" or "console"), with a "service" field.
func New(w io.Writer, level, format, service string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	switch format {
	case FormatJSON:
		enc = zapcore.NewJSONEncoder(encCfg)
	case FormatConsole:
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q: want json or console", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))).
		With(zap.String("service", service)), nil
}

type ctxKey struct{}

// WithLogger returns a context carrying l.
func WithLogger(ctx context.Context, l *zap.Logger) context.Context {
	return context.WithValue(ctx, ctxKey{}, l)
}

// From returns the logger carried by ctx, or a no-op logger.
func From(ctx context.Context) *zap.Logger {
	if l, ok := ctx.Value(ctxKey{}).(*zap.Logger); ok {
		return l
	}
	return zap.NewNop()
}
