package loadgen

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fixedDelayServer answers creates after a fixed service time, serving at
// most capacity requests at once (the others wait their turn), so it
// serves capacity/delay a second. Each request's latency as the server saw
// it, from its arrival to its answer, is the truth loadgen is held to: a
// request arrives when its connection is accepted, or on a connection
// already open, when the server reads it.
type fixedDelayServer struct {
	*httptest.Server
	mu        sync.Mutex
	latencies []time.Duration
}

func newFixedDelayServer(t *testing.T, capacity int, delay time.Duration) *fixedDelayServer {
	t.Helper()
	s := &fixedDelayServer{}
	slots := make(chan struct{}, capacity)
	type acceptedKey struct{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		// The first request of a connection arrived when it was accepted.
		if first, ok := r.Context().Value(acceptedKey{}).(*atomic.Pointer[time.Time]); ok {
			if at := first.Swap(nil); at != nil {
				arrived = *at
			}
		}
		select {
		case slots <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		// The simulated service time.
		work := time.NewTimer(delay)
		select {
		case <-work.C:
		case <-r.Context().Done():
			work.Stop()
			<-slots
			return
		}
		<-slots
		s.mu.Lock()
		s.latencies = append(s.latencies, time.Since(arrived))
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 200, "msg": "success", "data": map[string]string{"task_id": "task_x"}})
	}))
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		now := time.Now()
		var p atomic.Pointer[time.Time]
		p.Store(&now)
		return context.WithValue(ctx, acceptedKey{}, &p)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *fixedDelayServer) median() (time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := append([]time.Duration(nil), s.latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	if len(l) == 0 {
		return 0, 0
	}
	return l[len(l)/2], len(l)
}

func checkAccounted(t *testing.T, rep *Report) {
	t.Helper()
	if sum := rep.Completed + rep.Failed + rep.Dropped + rep.Unfinished; sum != rep.Offered || rep.Offered == 0 {
		t.Errorf("offered %d, but completed %d + failed %d + dropped %d + unfinished %d = %d", rep.Offered, rep.Completed, rep.Failed, rep.Dropped, rep.Unfinished, sum)
	}
	if rep.Sent != rep.Offered-rep.Dropped {
		t.Errorf("sent %d, offered %d, dropped %d", rep.Sent, rep.Offered, rep.Dropped)
	}
	var s Point
	for _, p := range rep.Series {
		s.Offered += p.Offered
		s.Sent += p.Sent
		s.Completed += p.Completed
		s.Failed += p.Failed
		s.Dropped += p.Dropped
		s.Unfinished += p.Unfinished
	}
	if s.Offered != rep.Offered || s.Sent != rep.Sent || s.Completed != rep.Completed || s.Failed != rep.Failed || s.Dropped != rep.Dropped || s.Unfinished != rep.Unfinished {
		t.Errorf("the per-second series adds up to %+v, the totals are %d/%d/%d/%d/%d/%d", s, rep.Offered, rep.Sent, rep.Completed, rep.Failed, rep.Dropped, rep.Unfinished)
	}
	if n := len(rep.Series); n > 0 && rep.Series[n-1].InFlight != 0 {
		t.Errorf("%d units still in flight at the end of the series", rep.Series[n-1].InFlight)
	}
}

// TestOverloadAccountsForEveryUnitAndMatchesTheServer: at three times a
// fixed-delay server's capacity, every unit offered is accounted for, those
// in flight when the arrivals end are waited for, and the median latency
// from the scheduled moments is within 10 % of the median the server
// measured itself. With --max-inflight the units over it are dropped,
// counted, and their latencies kept apart from the completed ones'.
func TestOverloadAccountsForEveryUnitAndMatchesTheServer(t *testing.T) {
	t.Parallel()
	// 50 a second, offered 150 a second for 1.2 s: the median unit waits
	// about 1.2 s. A low rate keeps the machine's own noise (connections,
	// goroutines, the race detector) small beside the queueing measured.
	const capacity, delay = 1, 20 * time.Millisecond
	for _, tc := range []struct {
		name        string
		maxInflight int
		wantDropped bool
	}{
		{"queueing", 0, false},
		{"dropping over max-inflight", 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFixedDelayServer(t, capacity, delay)
			rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate,
				Rate: 150, Duration: 1200 * time.Millisecond, MaxInflight: tc.maxInflight, Mix: []MixEntry{{Model: "m", Weight: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			checkAccounted(t, rep)
			truth, answered := srv.median()
			if rep.Failed != 0 || rep.Unfinished != 0 || rep.Completed != int64(answered) {
				t.Errorf("completed %d, failed %d %v, unfinished %d; the server answered %d", rep.Completed, rep.Failed, rep.Failures, rep.Unfinished, answered)
			}
			if (rep.Dropped > 0) != tc.wantDropped {
				t.Errorf("dropped %d", rep.Dropped)
			}
			if tc.wantDropped && (rep.Histograms["dropped"] == "" || rep.DroppedLatency.Max >= rep.Latency.P50) {
				t.Errorf("drops' latency %+v, completed %+v: want the drops kept apart (they are refused at once)", rep.DroppedLatency, rep.Latency)
			}
			got := time.Duration(rep.Latency.P50 * float64(time.Millisecond))
			if diff := got - truth; diff > truth/10 || -diff > truth/10 {
				t.Errorf("median %v, the server's %v: more than 10%% apart", got, truth)
			}
			// Three times the capacity: the achieved rate is well under
			// the offered one.
			if rep.Rates.Offered < 140 || rep.Rates.Achieved > rep.Rates.Offered/2 {
				t.Errorf("rates %+v", rep.Rates)
			}
			t.Logf("offered %d completed %d dropped %d, p50 %v (server %v), rates %+v, lag %+v", rep.Offered, rep.Completed, rep.Dropped, got, truth, rep.Rates, rep.GeneratorLag)
		})
	}
}

// TestGraceEndsWithUnfinishedUnits: the units still in flight when the grace
// period ends are counted as unfinished, not lost.
func TestGraceEndsWithUnfinishedUnits(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate,
		Rate: 100, Requests: 20, Grace: 50 * time.Millisecond, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, rep)
	if rep.Offered != 20 || rep.Unfinished != 20 || rep.UnfinishedLatency.Max == 0 {
		t.Errorf("offered %d unfinished %d (latency %+v); want all 20 unfinished", rep.Offered, rep.Unfinished, rep.UnfinishedLatency)
	}
}

// TestOpenLoopOffersEveryScheduledUnitWhenLate: a generator that falls
// behind its schedule still offers every unit scheduled within the
// duration, late (its lag says how late), instead of stopping at the
// duration's end with units never offered.
func TestOpenLoopOffersEveryScheduledUnitWhenLate(t *testing.T) {
	t.Parallel()
	var st atomic.Int32
	st.Store(200)
	srv := fakeAPI(t, &st)
	// 100,000 a second for a tenth of a second: more than the generator
	// keeps up with here, so it runs late; most units are dropped at once.
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"k"}, Mode: ModeCreate,
		Rate: 100_000, Duration: 100 * time.Millisecond, MaxInflight: 2, Mix: []MixEntry{{Model: "m", Weight: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	checkAccounted(t, rep)
	if rep.Offered != 10_000 || rep.Dropped == 0 {
		t.Errorf("offered %d (dropped %d), want all 10000 scheduled", rep.Offered, rep.Dropped)
	}
	t.Logf("lag %+v, completed %d", rep.GeneratorLag, rep.Completed)
}
