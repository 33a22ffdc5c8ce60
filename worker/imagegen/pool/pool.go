// Package pool is a Generator over a pool of upstream credentials
// (EASEL_UPSTREAMS_FILE, package upstream): each call goes to an upstream
// chosen by weight among those that serve the task's model and that their
// shared circuit breakers let through, and a retryable failure moves the
// call to another upstream at once, inside the one try. A refusal of the
// caller's own input (content safety, an invalid source image) is final,
// never tried elsewhere. The file is re-read when it changes.
package pool

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/quota"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/worker/imagegen"
)

// Observer records the upstreams' calls and their breakers' states
// (the worker's metrics).
type Observer interface {
	UpstreamCall(name string, o upstream.Outcome, d time.Duration)
	UpstreamBreaker(name string, s upstream.State)
	// UpstreamRemoved: the file no longer has the upstream; its figures go.
	UpstreamRemoved(name string)
}

// NewGenerator makes the generator of one upstream (a Gemini or Vertex AI
// client).
type NewGenerator func(ctx context.Context, u upstream.Upstream) (imagegen.Generator, error)

// member is an upstream of the loaded pool, with its generator.
type member struct {
	up  upstream.Upstream
	gen imagegen.Generator
}

// loaded is one version of the pool: calls that began with it finish
// with it, whatever a reload does meanwhile.
type loaded struct {
	members  []*member
	breakers *upstream.Breakers
	quota    *quota.Quota // nil: no upstream has a quota
	sum      [32]byte     // the file's content, and its credentials files'
	creds    []string     // the credentials files it read
}

// contentSum hashes the pool file's content and its credentials files':
// a key rotated in place (a Kubernetes Secret updated) is a change too.
func contentSum(data []byte, creds []string) [32]byte {
	h := sha256.New()
	h.Write(data)
	for _, f := range creds {
		b, _ := os.ReadFile(f)
		sum := sha256.Sum256(b)
		h.Write(sum[:])
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Pool is the Generator.
type Pool struct {
	rdb    redis.UniversalClient
	log    *zap.Logger
	obs    Observer
	newGen NewGenerator
	cur    atomic.Pointer[loaded]
	// refused remembers the credentials already reported refused, so the
	// error is logged once, loudly, not at every call.
	refused sync.Map
	// ProbeLease is how long a half-open probe holds its breaker (tests
	// shorten it).
	ProbeLease time.Duration
	// Tracer, when set, makes an "upstream.call" span of each upstream a
	// traced run's call tries (nil: none).
	Tracer trace.Tracer
}

// New returns a pool of no upstreams yet: Load gives it its file.
func New(rdb redis.UniversalClient, newGen NewGenerator, obs Observer, log *zap.Logger) *Pool {
	return &Pool{rdb: rdb, log: log, obs: obs, newGen: newGen, ProbeLease: 2 * time.Minute}
}

// quotaKey is an upstream's key in the shared quota.
var quotaKey = upstream.QuotaKey

// Load makes p use the checked file pl (content: its bytes, to tell a
// change), building each upstream's client. Calls under way keep the
// version they began with.
func (p *Pool) Load(ctx context.Context, pl *upstream.Pool, content []byte) error {
	l := &loaded{breakers: upstream.NewBreakers(p.rdb, pl.Breaker), creds: pl.CredentialFiles()}
	l.sum = contentSum(content, l.creds)
	l.breakers.ProbeLease = p.ProbeLease
	limits := quota.Limits{}
	for _, u := range pl.Upstreams {
		g, err := p.newGen(ctx, u)
		if err != nil {
			return fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		l.members = append(l.members, &member{up: u, gen: g})
		if u.RPM > 0 || u.Concurrency > 0 {
			limits[quotaKey(u.Name)] = quota.Limit{PerMinute: u.RPM, Concurrent: u.Concurrency}
		}
	}
	if len(limits) > 0 {
		// A 429 cools the upstream's quota as long as its breaker's
		// throttle, no longer.
		l.quota = quota.New(p.rdb, limits, quota.Options{Cooldown: time.Duration(pl.Breaker.Throttle), MaxCooldown: time.Duration(pl.Breaker.MaxThrottle)})
	}
	prev := p.cur.Swap(l)
	if prev != nil {
		kept := map[string]bool{}
		for _, u := range pl.Upstreams {
			kept[u.Name] = true
		}
		for _, m := range prev.members {
			if !kept[m.up.Name] {
				p.obs.UpstreamRemoved(m.up.Name)
			}
		}
	}
	if err := upstream.Publish(ctx, p.rdb, pl); err != nil {
		p.log.Warn("could not record the upstreams for operators", zap.Error(err))
	}
	names := make([]string, len(pl.Upstreams))
	for i, u := range pl.Upstreams {
		names[i] = u.Name
	}
	p.log.Info("upstreams loaded", zap.Strings("upstreams", names))
	return nil
}

// Watch re-reads the file at path every interval, and when hup fires
// (SIGHUP), and loads it when its content changed, until ctx is done. A
// file that does not parse is logged and the pool kept as it is.
func (p *Pool) Watch(ctx context.Context, path string, getenv func(string) string, every time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(every)
	defer t.Stop()
	// A content that did not load is tried again after badRetry (the
	// credentials file it names may be mounted later), or at once on
	// SIGHUP; its error is logged once a try, not once a tick.
	const badRetry = time.Minute
	var (
		badSum [32]byte
		badAt  time.Time
	)
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-hup:
			forced = true
			p.log.Info("SIGHUP: reading the upstreams file again", zap.String("path", path))
		}
		data, err := os.ReadFile(path)
		if err != nil {
			p.log.Error("upstreams file: cannot read it; keeping the pool as it is", zap.String("path", path), zap.Error(err))
			p.refusedFile(ctx, path, err)
			continue
		}
		cur := p.cur.Load()
		if !forced && cur != nil && cur.sum == contentSum(data, cur.creds) {
			continue
		}
		if sum := sha256.Sum256(data); !forced && sum == badSum && time.Since(badAt) < badRetry {
			continue
		}
		pl, err := upstream.Parse(data, getenv)
		if err == nil {
			err = p.Load(ctx, pl, data)
		}
		if err != nil {
			p.log.Error("upstreams file changed but is not usable; keeping the pool as it is", zap.String("path", path), zap.Error(err))
			badSum, badAt = sha256.Sum256(data), time.Now()
			p.refusedFile(ctx, path, err)
			continue
		}
		p.LoadedFrom(ctx, path)
	}
}

// LoadedFrom records, for operators, that the pool was loaded from the
// file at path now.
func (p *Pool) LoadedFrom(ctx context.Context, path string) {
	if err := upstream.RecordLoaded(ctx, p.rdb, path, time.Now()); err != nil {
		p.log.Warn("could not record the upstreams file's state for operators", zap.Error(err))
	}
}

// refusedFile records, for operators, that a change of the file was
// refused, and why.
func (p *Pool) refusedFile(ctx context.Context, path string, reason error) {
	if err := upstream.RecordRefused(ctx, p.rdb, path, time.Now(), reason); err != nil {
		p.log.Warn("could not record the upstreams file's state for operators", zap.Error(err))
	}
}

// errNone is the cause when no upstream could take a call.
var errNone = errors.New("no upstream available")

// Generate makes the images on one upstream of the pool, moving to
// another at once when one fails in a way another may not.
func (p *Pool) Generate(ctx context.Context, req imagegen.Request, progress func(int)) ([]imagegen.Image, error) {
	l := p.cur.Load()
	if l == nil {
		return nil, apperr.Transient(errNone, task.UpstreamUnavailable, "the image model is unavailable; try again later")
	}
	var cands []*member
	for _, m := range l.members {
		if m.up.Serves(req.Model.Tier) {
			cands = append(cands, m)
		}
	}
	log := p.logger(ctx)
	// Progress only rises, whichever upstream reports it.
	var best atomic.Int64
	rising := func(pct int) {
		for {
			b := best.Load()
			if int64(pct) <= b {
				return
			}
			if best.CompareAndSwap(b, int64(pct)) {
				progress(pct)
				return
			}
		}
	}
	tried := make(map[*member]bool, len(cands))
	// busy are the upstreams skipped for want of quota: tried last, then
	// waited for, when no other could take the call.
	var busy []*member
	var lastErr error
	for {
		m := pick(cands, tried)
		waitQuota := false
		if m == nil {
			if len(busy) == 0 {
				break
			}
			m, busy, waitQuota = busy[0], busy[1:], true
		}
		tried[m] = true
		cctx, span := p.span(ctx, m)
		verdict, _, err := l.breakers.Allow(cctx, m.up)
		if err != nil {
			endSpan(span, err)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			lastErr = apperr.Transient(err, task.UpstreamUnavailable, "the image model is unavailable; try again later")
			continue
		}
		span.SetAttributes(attrBreaker.String(breakerVerdict(verdict)))
		if verdict == upstream.Deny || verdict == upstream.Disabled {
			span.End()
			continue
		}
		release, ok, err := p.slot(cctx, l, m, waitQuota)
		if err != nil {
			endSpan(span, err)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// The quota's store failed: not the upstream's fault.
			l.breakers.GiveBack(ctx, m.up, verdict)
			lastErr = apperr.Transient(err, task.UpstreamUnavailable, "the image model is unavailable; try again later")
			continue
		}
		if !ok {
			// No quota left now: another upstream first.
			l.breakers.GiveBack(ctx, m.up, verdict)
			span.SetAttributes(attrQuota.String("busy"))
			span.End()
			busy = append(busy, m)
			continue
		}
		imgs, outcome, err := p.call(cctx, l, m, req, rising, release)
		span.SetAttributes(attrOutcome.String(string(outcome)))
		if ctx.Err() != nil {
			// The task's deadline or a shutdown: the processor decides. A
			// probe cut short says nothing of the upstream: the next caller
			// may probe.
			endSpan(span, ctx.Err())
			l.breakers.GiveBack(ctx, m.up, verdict)
			return nil, ctx.Err()
		}
		p.report(ctx, l, m, outcome, err, verdict == upstream.Probe)
		switch outcome {
		case upstream.Success:
			span.End()
			return imgs, nil
		case upstream.Final:
			endSpan(span, err)
			return nil, err
		}
		lastErr = err
		if pick(cands, tried) != nil || len(busy) > 0 {
			// The call moves on to another upstream.
			span.AddEvent(eventFailover)
		}
		endSpan(span, err)
		log.Info("upstream failed; trying another", zap.String("upstream", m.up.Name), zap.String("outcome", string(outcome)), zap.Error(err))
	}
	if lastErr != nil {
		// Retryable, and no longer a 429 of one upstream (the pool has
		// cooled it): the worker's retries apply, not a cooldown of the
		// whole model.
		return nil, apperr.Transient(fmt.Errorf("%w: the last: %v", errNone, lastErr), task.UpstreamUnavailable, "the image model is unavailable; try again later")
	}
	return nil, apperr.Transient(fmt.Errorf("%w for model %s: every upstream serving it is open, cooling or disabled", errNone, req.Model.ID),
		task.UpstreamUnavailable, "the image model is unavailable; try again later")
}

// The span of each upstream a call tries, its attributes and its event
// when the call moves to another upstream.
const (
	SpanCall      = "upstream.call"
	eventFailover = "failover"
)

var (
	attrUpstream = attribute.Key("easel.upstream")
	attrBreaker  = attribute.Key("easel.breaker")
	attrOutcome  = attribute.Key("easel.upstream_outcome")
	attrQuota    = attribute.Key("easel.quota")
)

// noSpan is the span of an untraced call: ending it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// span starts the "upstream.call" span of a try of m, within a traced
// run.
func (p *Pool) span(ctx context.Context, m *member) (context.Context, trace.Span) {
	if p.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return p.Tracer.Start(ctx, SpanCall, trace.WithAttributes(attrUpstream.String(m.up.Name)))
}

// breakerVerdict names a breaker's verdict in a span: the state that let
// the call through (closed, half-open: the probe) or not (open), or
// skipped for an upstream disabled (its credentials refused).
func breakerVerdict(v upstream.Verdict) string {
	switch v {
	case upstream.Allow:
		return "closed"
	case upstream.Probe:
		return "half-open"
	case upstream.Deny:
		return "open"
	}
	return "skipped"
}

// endSpan ends s, an error when err is not nil.
func endSpan(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, apperr.MessageOf(err))
	}
	s.End()
}

// quotaPeek is how long a call waits for an upstream's quota while other
// upstreams could take it.
const quotaPeek = 20 * time.Millisecond

// slot takes a slot of m's quota: at once or not at all (ok false) unless
// wait, when it waits as long as the call may.
func (p *Pool) slot(ctx context.Context, l *loaded, m *member, wait bool) (func(), bool, error) {
	if l.quota == nil || l.quota.Limit(quotaKey(m.up.Name)) == (quota.Limit{}) {
		return func() {}, true, nil
	}
	actx := ctx
	if !wait {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, quotaPeek)
		defer cancel()
	}
	s, err := l.quota.Acquire(actx, quotaKey(m.up.Name))
	if err != nil {
		if !wait && ctx.Err() == nil && actx.Err() != nil {
			return nil, false, nil
		}
		return nil, false, err
	}
	return s.Release, true, nil
}

// call makes one call to m, holding its quota's slot (release), and
// classifies its outcome.
func (p *Pool) call(ctx context.Context, l *loaded, m *member, req imagegen.Request, progress func(int), release func()) ([]imagegen.Image, upstream.Outcome, error) {
	start := time.Now()
	imgs, err := func() ([]imagegen.Image, error) {
		defer release()
		return m.gen.Generate(ctx, req, progress)
	}()
	o := classify(err)
	if p.obs != nil && ctx.Err() == nil {
		p.obs.UpstreamCall(m.up.Name, o, time.Since(start))
	}
	if o == upstream.Throttled && l.quota != nil {
		_ = l.quota.Throttled(ctx, quotaKey(m.up.Name), 0)
	}
	return imgs, o, err
}

// report tells m's breaker, logs its changes, and says loudly, once, that
// a credential was refused.
func (p *Pool) report(ctx context.Context, l *loaded, m *member, o upstream.Outcome, err error, probe bool) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	before, after, rerr := l.breakers.Report(rctx, m.up, o, msg)
	log := p.logger(ctx).With(zap.String("upstream", m.up.Name))
	if rerr != nil {
		log.Warn("could not record the upstream's call in its breaker", zap.Error(rerr))
		return
	}
	if p.obs != nil {
		p.obs.UpstreamBreaker(m.up.Name, after)
	}
	if before != after {
		lvl := log.Info
		if after == upstream.Open {
			lvl = log.Warn
		}
		lvl("upstream breaker "+string(after), zap.String("from", string(before)), zap.Bool("probe", probe), zap.Error(err))
	}
	if o == upstream.Refused {
		if _, seen := p.refused.LoadOrStore(m.up.Name+"|"+m.up.Fingerprint(), true); !seen {
			log.Error("UPSTREAM CREDENTIAL REFUSED: the provider refused this upstream's key or credentials; it is disabled on every worker until the upstreams file gives it another",
				zap.String("provider", m.up.Provider), zap.Error(err))
		}
	}
}

// logger is the call's logger (with its task), or the pool's.
func (p *Pool) logger(ctx context.Context) *zap.Logger {
	if len(logging.Fields(ctx)) > 0 {
		return logging.From(ctx)
	}
	return p.log
}

// classify tells what a generator's error means for its upstream.
func classify(err error) upstream.Outcome {
	switch {
	case err == nil:
		return upstream.Success
	case errors.Is(err, imagegen.ErrRefused):
		return upstream.Refused
	case errors.Is(err, imagegen.ErrThrottled):
		return upstream.Throttled
	case apperr.IsRetryable(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, imagegen.ErrUpstreamFault):
		return upstream.Failure
	}
	return upstream.Final
}

// pick draws an untried candidate by weight; nil when none is left.
func pick(cands []*member, tried map[*member]bool) *member {
	total := 0
	for _, m := range cands {
		if !tried[m] {
			total += m.up.Weight
		}
	}
	if total == 0 {
		return nil
	}
	n := rand.IntN(total)
	for _, m := range cands {
		if tried[m] {
			continue
		}
		if n < m.up.Weight {
			return m
		}
		n -= m.up.Weight
	}
	return nil
}

// Tiers lists the tiers some upstream of the pool serves.
func (p *Pool) Tiers() []catalog.Tier {
	l := p.cur.Load()
	seen := map[catalog.Tier]bool{}
	var out []catalog.Tier
	if l == nil {
		return nil
	}
	for _, m := range l.members {
		for _, t := range []catalog.Tier{catalog.Standard, catalog.Pro} {
			if m.up.Serves(t) && !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}
