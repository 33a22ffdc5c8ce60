package processor

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/easelhq/easel/pkg/apperr"
)

// TracerName names the worker's tracer (the instrumentation scope of its
// spans).
const TracerName = "github.com/easelhq/easel/worker"

// The spans of a run, in the trace of the task's create: docs/operations.md
// lists them.
const (
	SpanRun    = "task.run"
	SpanParked = "queue.parked"
	SpanWait   = "queue.wait"
	SpanCall   = "upstream.call"
	SpanStore  = "result.store"
)

// Attributes of the worker's spans.
const (
	AttrTaskID   = attribute.Key("easel.task_id")
	AttrRun      = attribute.Key("easel.run")
	AttrWorker   = attribute.Key("easel.worker")
	AttrUpstream = attribute.Key("easel.upstream")
	AttrBreaker  = attribute.Key("easel.breaker")
	AttrOutcome  = attribute.Key("easel.outcome")
	AttrCode     = attribute.Key("easel.error_code")
)

// BreakerNone is the easel.breaker of a call no breaker judged: a
// generator outside the pool.
const BreakerNone = "skipped"

// noSpan is what a span of an untraced run is: ending it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startRun starts the run's span, a child of the create's span context in
// parent, at dequeued (when the run took the job).
func (p *Processor) startRun(parent context.Context, id, run string, dequeued time.Time) (context.Context, trace.Span) {
	return p.tracer.Start(parent, SpanRun,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(dequeued),
		trace.WithAttributes(AttrTaskID.String(id), AttrRun.String(run), AttrWorker.String(p.Worker)))
}

// traceQueue records, in the create's trace (create), the task's time
// parked for a place (from its creation to its admission, when it was
// parked) and queued (from then to this start, by this worker).
func (p *Processor) traceQueue(create context.Context, id string, created, admitted, started time.Time) {
	attrs := trace.WithAttributes(AttrTaskID.String(id), AttrWorker.String(p.Worker))
	if !admitted.IsZero() && admitted.After(created) {
		_, s := p.tracer.Start(create, SpanParked, attrs, trace.WithTimestamp(created))
		s.End(trace.WithTimestamp(admitted))
		created = admitted
	}
	_, s := p.tracer.Start(create, SpanWait, attrs, trace.WithTimestamp(created))
	s.End(trace.WithTimestamp(started))
}

// span starts a child span of the run's span in ctx; within a run that
// is not traced, none.
func (p *Processor) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if p.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return p.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends s with err's status: an error, its code and message, when
// err is not nil.
func endSpan(s trace.Span, err error) {
	if err != nil && s.IsRecording() {
		s.RecordError(err)
		s.SetStatus(codes.Error, apperr.MessageOf(err))
		if c := apperr.CodeOf(err); c != "" {
			s.SetAttributes(AttrCode.String(string(c)))
		}
	}
	s.End()
}
