package worker

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/blob"
)

// janitorEvery is how often the janitor looks for expired results.
const janitorEvery = 10 * time.Minute

// expirer is a store that may expire blobs itself: a bucket with a
// lifecycle rule (blob.S3).
type expirer interface {
	Expiry(ctx context.Context) (time.Duration, bool, error)
}

// runJanitor removes blobs past their retention, now and then every ten
// minutes. Every worker runs one; they tolerate each other. On a bucket
// whose lifecycle rule expires results, it leaves the bucket to the rule
// (asking again each round, so a rule added or removed later is seen).
func runJanitor(ctx context.Context, blobs blob.Store, retention time.Duration, log *zap.Logger) {
	t := time.NewTicker(janitorEvery)
	defer t.Stop()
	ruled := false // the last round found a rule
	for {
		if !leftToLifecycle(ctx, blobs, &ruled, log) {
			n, err := blobs.Sweep(ctx, time.Now().Add(-retention))
			switch {
			case err != nil && !errors.Is(err, context.Canceled):
				log.Warn("blob janitor", zap.Error(err))
			case n > 0:
				log.Info("blob janitor removed expired results", zap.Int("files", n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leftToLifecycle reports whether the store expires its blobs itself, and
// logs when that changes.
func leftToLifecycle(ctx context.Context, blobs blob.Store, ruled *bool, log *zap.Logger) bool {
	e, ok := blobs.(expirer)
	if !ok {
		return false
	}
	after, ok, err := e.Expiry(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("blob janitor: cannot read the bucket's lifecycle rules; sweeping it instead", zap.Error(err))
		}
		return false
	case ok && !*ruled:
		log.Info("blob janitor: the bucket's lifecycle rule expires results; the janitor leaves them to it", zap.Duration("after", after))
	case !ok && *ruled:
		log.Warn("blob janitor: the bucket's lifecycle rule is gone; the janitor sweeps it again")
	}
	*ruled = ok
	return ok
}
