package quota

import (
	"context"
	"embed"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/easelhq/easel/pkg/logging"
	"github.com/easelhq/easel/pkg/luascript"
)

// Slot is the right to make one upstream call, from Acquire. While it is
// held its lease in Redis is extended; Release gives it back.
type Slot struct {
	q      *Quota
	m      *model
	member string // the holder's id in the semaphore; "" without one
	waited time.Duration
	log    *zap.Logger

	cancel context.CancelFunc // stops the extensions
	done   chan struct{}      // closed when they have stopped
	once   sync.Once
}

// Waited is how long Acquire waited for the slot (cooldown, semaphore and
// rate together).
func (s *Slot) Waited() time.Duration {
	if s == nil {
		return 0
	}
	return s.waited
}

// Release gives the slot back: it stops counting at once for every worker,
// and a waiter of this process asks for it at once. Call it once the call
// is over, whatever its outcome; later calls do nothing. Should Redis not
// answer, the slot frees itself when its lease runs out.
func (s *Slot) Release() {
	if s == nil || s.member == "" {
		return
	}
	s.once.Do(func() {
		s.cancel()
		<-s.done // no extension may re-add the holder after the ZREM
		ctx, cancel := context.WithTimeout(context.Background(), s.q.opts.Lease/3)
		defer cancel()
		if err := s.q.rdb.ZRem(ctx, s.m.holders, s.member).Err(); err != nil {
			s.log.Warn("quota: a slot could not be released; it frees itself when its lease runs out",
				zap.String("model", s.m.name), zap.Duration("lease", s.q.opts.Lease), zap.Error(err))
		}
		select {
		case s.m.freed <- struct{}{}:
		default:
		}
	})
}

// The semaphore's and the cooldown's scripts (lua/).
//
//go:embed lua/*.lua
var luaFiles embed.FS

var scripts = luascript.NewLibrary("quota", luaFiles, "lua", "")

var (
	acquireScript = luascript.Load[acquireKeys, slotArgs, acquireReply](scripts, "acquire",
		map[string]int64{"ACQUIRED": acquired, "COOLING": cooling, "FULL": full})
	extendScript = luascript.Load[extendKeys, slotArgs, codeReply](scripts, "extend",
		map[string]int64{"EXTENDED": extended, "RETAKEN": retaken, "FULL": full})
	cooldownScript = luascript.Load[cooldownKeys, cooldownArgs, codeReply](scripts, "cooldown",
		map[string]int64{"SET": 1, "KEPT": 0})
)

// The scripts' codes.
const (
	acquired = 1
	cooling  = 0
	full     = -1
	extended = 1
	retaken  = 2
)

type acquireKeys struct {
	Holders  string `lua:"holders"`
	Cooldown string `lua:"cooldown"`
}

type extendKeys struct {
	Holders string `lua:"holders"`
}

type slotArgs struct {
	Holder string `lua:"holder"`
	Limit  int    `lua:"limit"`
	Lease  int64  `lua:"lease"`
}

type acquireReply struct {
	Code int64 `lua:"code"`
	Wait int64 `lua:"wait"` // COOLING: ms
}

type cooldownKeys struct {
	Cooldown string `lua:"cooldown"`
}

type cooldownArgs struct {
	Ms int64 `lua:"ms"`
}

type codeReply struct {
	Code int64 `lua:"code"`
}

// takeSlot waits for a place in m's semaphore (and for no cooldown).
func (q *Quota) takeSlot(ctx context.Context, m *model) (*Slot, error) {
	if err := lock(ctx, m.slotGate); err != nil {
		return nil, err
	}
	defer unlock(m.slotGate)
	member := q.id + ":" + strconv.FormatUint(q.seq.Add(1), 36)
	lease := q.opts.Lease.Milliseconds()
	for {
		r, err := acquireScript.Call(ctx, q.rdb, acquireKeys{Holders: m.holders, Cooldown: m.cooldown},
			slotArgs{Holder: member, Limit: m.lim.Concurrent, Lease: lease})
		if err != nil {
			// The script may have added the holder before its answer was
			// lost: take it out, or it would count until its lease ran out.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.opts.Lease/3)
			_ = q.rdb.ZRem(rctx, m.holders, member).Err()
			cancel()
			return nil, q.redisErr(ctx, err)
		}
		switch r.Code {
		case acquired:
			return q.newSlot(ctx, m, member), nil
		case cooling:
			err = sleep(ctx, time.Duration(r.Wait)*time.Millisecond, nil)
		default:
			err = sleep(ctx, jitter(q.opts.Poll), m.freed)
		}
		if err != nil {
			return nil, err
		}
	}
}

// newSlot returns the slot of a holder just added, its lease extended
// every Lease/3 until Release.
func (q *Quota) newSlot(ctx context.Context, m *model, member string) *Slot {
	ectx, cancel := context.WithCancel(context.Background())
	s := &Slot{
		q: q, m: m, member: member,
		log:    logging.From(ctx),
		cancel: cancel, done: make(chan struct{}),
	}
	go s.extend(ectx)
	return s
}

// extend extends the slot's lease every Lease/3 until ctx ends.
func (s *Slot) extend(ctx context.Context) {
	defer close(s.done)
	every := s.q.opts.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	keys := extendKeys{Holders: s.m.holders}
	args := slotArgs{Holder: s.member, Limit: s.m.lim.Concurrent, Lease: s.q.opts.Lease.Milliseconds()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		r, err := extendScript.Call(rctx, s.q.rdb, keys, args)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("quota: a slot's lease could not be extended; trying again",
				zap.String("model", s.m.name), zap.Duration("every", every), zap.Error(err))
		case r.Code == full:
			s.log.Warn("quota: a slot's lease ran out and the others took its place; this call runs uncounted",
				zap.String("model", s.m.name))
		case r.Code == retaken:
			s.log.Warn("quota: a slot's lease ran out; it was taken again", zap.String("model", s.m.name))
		}
	}
}
