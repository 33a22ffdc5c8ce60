// Package logging builds Easel's zap loggers and carries a request- or
// task-scoped logger in a context.
package logging

import (
	"context"
	"fmt"
	"io"
	"time"

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
	// Buffered: a busy service writes its log lines in batches, not one
	// write(2) each. Buffered lines reach w within a second, and at once on
	// Sync (which every main defers). A warning or an error is never held:
	// it flushes the buffer, lines before it included, so a process killed
	// at once (kill -9) loses at most a second of info lines, never one
	// saying what went wrong.
	// Flushing writes the buffer out; it never fsyncs w: stderr is a pipe
	// or a terminal, where fsync fails (EINVAL) and would print a "write
	// error" line of its own.
	ws := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(struct{ io.Writer }{w}), Size: 256 << 10, FlushInterval: time.Second}
	core := flushing{zapcore.NewCore(enc, ws, lvl), ws}
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(zapcore.Lock(zapcore.AddSync(w)))).
		With(zap.String("service", service)), nil
}

// flushing is a core that flushes its buffered output after every entry at
// warn level or above.
type flushing struct {
	zapcore.Core
	ws zapcore.WriteSyncer
}

func (f flushing) With(fields []zapcore.Field) zapcore.Core {
	return flushing{f.Core.With(fields), f.ws}
}

func (f flushing) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.Enabled(e.Level) {
		return ce.AddCore(e, f)
	}
	return ce
}

func (f flushing) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if err := f.Core.Write(e, fields); err != nil {
		return err
	}
	if e.Level >= zapcore.WarnLevel {
		return f.ws.Sync()
	}
	return nil
}

type ctxKey struct{}

// scoped is a logger with fields added as a request goes: it is built only
// if something is logged, so a request that logs nothing but its access
// line pays for no logger.
type scoped struct {
	base   *zap.Logger
	fields []zap.Field
	built  *zap.Logger
}

func (s *scoped) logger() *zap.Logger {
	if s.built == nil {
		s.built = s.base.With(s.fields...)
	}
	return s.built
}

// WithLogger returns a context carrying l with fields.
func WithLogger(ctx context.Context, l *zap.Logger, fields ...zap.Field) context.Context {
	return context.WithValue(ctx, ctxKey{}, &scoped{base: l, fields: fields})
}

// AddFields adds fields to the logger ctx carries (for one goroutine's
// request or task). It reports false when ctx carries none.
func AddFields(ctx context.Context, fields ...zap.Field) bool {
	s, ok := ctx.Value(ctxKey{}).(*scoped)
	if !ok {
		return false
	}
	s.fields = append(s.fields, fields...)
	if s.built != nil {
		s.built = s.built.With(fields...)
	}
	return true
}

// Fields returns the fields added to ctx's logger.
func Fields(ctx context.Context) []zap.Field {
	if s, ok := ctx.Value(ctxKey{}).(*scoped); ok {
		return s.fields
	}
	return nil
}

// From returns the logger carried by ctx, or a no-op logger.
func From(ctx context.Context) *zap.Logger {
	if s, ok := ctx.Value(ctxKey{}).(*scoped); ok {
		return s.logger()
	}
	return zap.NewNop()
}
