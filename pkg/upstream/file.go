package upstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// FileState is the upstreams file as the workers last read it, for
// operators: which file, when the pool they run was loaded from it, and
// the last change they refused (a file that does not parse or whose
// upstreams cannot be built), which leaves the pool as it was.
type FileState struct {
	Path     string    `json:"path"`
	LoadedAt time.Time `json:"loaded_at"`
	// RefusedAt and Refusal: the last change refused since the pool was
	// loaded, and why (none: the file as loaded is the file on disk).
	RefusedAt *time.Time `json:"refused_at,omitempty"`
	Refusal   string     `json:"refusal,omitempty"`
}

// The file state's hash fields.
const (
	fFilePath    = "path"
	fFileLoaded  = "loaded"
	fFileRefused = "refused"
	fFileReason  = "reason"
)

// RecordLoaded records that the pool was loaded from the file at path at t:
// a refusal before it no longer stands.
func RecordLoaded(ctx context.Context, rdb redis.UniversalClient, path string, t time.Time) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, fileKey, fFileRefused, fFileReason)
		p.HSet(ctx, fileKey, fFilePath, path, fFileLoaded, t.UnixMilli())
		return nil
	})
	if err != nil {
		return fmt.Errorf("upstreams file state: %w", err)
	}
	return nil
}

// RecordRefused records that a change of the file at path was refused at t,
// and why: the pool stays as it was loaded.
func RecordRefused(ctx context.Context, rdb redis.UniversalClient, path string, t time.Time, reason error) error {
	if err := rdb.HSet(ctx, fileKey, fFilePath, path, fFileRefused, t.UnixMilli(), fFileReason, reason.Error()).Err(); err != nil {
		return fmt.Errorf("upstreams file state: %w", err)
	}
	return nil
}

// ReadFileState reads the file's state; nil when no worker recorded one (no pool).
func ReadFileState(ctx context.Context, rdb redis.UniversalClient) (*FileState, error) {
	m, err := rdb.HGetAll(ctx, fileKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("upstreams file state: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	ms := func(f string) (time.Time, bool) {
		n, err := strconv.ParseInt(m[f], 10, 64)
		return time.UnixMilli(n).UTC(), err == nil && n > 0
	}
	f := &FileState{Path: m[fFilePath]}
	f.LoadedAt, _ = ms(fFileLoaded)
	if t, ok := ms(fFileRefused); ok {
		f.RefusedAt, f.Refusal = &t, m[fFileReason]
	}
	return f, nil
}
