package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/tools/loadgen"
)

// commandCounts are the Redis commands a fixed number of requests cost,
// per request and by command: Sent, the commands clients sent (round
// trips: MONITOR's lines from a client's address, a script's own commands
// left out), and Stats, INFO commandstats (every command, the scripts'
// own included), summed over the masters of a cluster.
type commandCounts struct {
	Requests int64              `json:"requests"`
	Sent     map[string]float64 `json:"sent_per_request"`
	Stats    map[string]float64 `json:"commandstats_per_request"`
}

// countRequests is how many requests the count runs make.
const countRequests = 2000

// countCommands runs n requests of mode (query: after its tasks are
// created) against base and counts what they cost Redis.
func (e *env) countCommands(ctx context.Context, base, mode string, n int64) (*commandCounts, error) {
	mon := &monitors{}
	defer mon.stop()
	var startErr error
	begin := func() {
		if err := eachServer(ctx, e.rdb, func(ctx context.Context, c *redis.Client) error {
			return c.ConfigResetStat(ctx).Err()
		}); err != nil {
			startErr = err
			return
		}
		startErr = mon.start(ctx, e.rdb)
	}
	cfg := loadgen.Config{BaseURL: base, Keys: e.keys, Mode: mode, Concurrency: 32, Requests: n,
		Mix: benchMix(), QueryTasks: 100, Timeout: 10 * time.Second}
	if mode == loadgen.ModeQuery {
		cfg.AfterSetup = begin
	} else {
		begin()
	}
	if startErr != nil {
		return nil, startErr
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if startErr != nil {
		return nil, startErr
	}
	op := rep.Ops[loadgen.OpCreate]
	if mode == loadgen.ModeQuery {
		op = rep.Ops[loadgen.OpQuery]
	}
	if op == nil || op.OK != n {
		return nil, fmt.Errorf("count run: %+v; want %d answered", op, n)
	}
	sent, err := mon.finish(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	stats, err := commandstats(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	cc := &commandCounts{Requests: n, Sent: map[string]float64{}, Stats: map[string]float64{}}
	for name, v := range sent {
		cc.Sent[name] = float64(v) / float64(n)
	}
	for name, v := range stats {
		cc.Stats[name] = v / float64(n)
	}
	return cc, nil
}

// monitors follow MONITOR on every master and count the commands clients
// sent, by name. Each MONITOR runs on a connection of its own, read line
// by line (go-redis's MonitorCmd gives its connection back to the pool
// while the server streams on it, and the pool then closes it).
type monitors struct {
	mu      sync.Mutex
	counts  map[string]int64
	conns   []net.Conn
	markers []*redis.Client // one per master, for the marks
	ended   map[string]chan struct{}
	wg      sync.WaitGroup
}

const (
	markStart = "easelbench-count-start"
	markEnd   = "easelbench-count-end"
)

// monitorLine reads a MONITOR line: `ts [db addr] "cmd" "arg"...`; lua
// says whether a script ran it.
func monitorLine(line string) (cmd, firstArg string, lua bool, ok bool) {
	open, end := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
	if open < 0 || end < open {
		return "", "", false, false
	}
	lua = strings.HasSuffix(line[open:end], " lua")
	fields := strings.SplitN(line[end+1:], "\"", 5)
	if len(fields) < 2 {
		return "", "", false, false
	}
	cmd = strings.ToLower(fields[1])
	if len(fields) >= 4 {
		firstArg = fields[3]
	}
	return cmd, firstArg, lua, true
}

// respCommand is a command in RESP, as a client sends it.
func respCommand(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// monitor opens a connection to o's server and starts MONITOR on it.
func monitor(ctx context.Context, o *redis.Options) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, nil, err
	}
	rd := bufio.NewReader(c)
	expectOK := func(cmd ...string) error {
		if _, err := c.Write(respCommand(cmd...)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadString('\n')
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("%s: %q", cmd[0], strings.TrimSpace(line))
		}
		return nil
	}
	if o.Password != "" {
		args := []string{"AUTH", o.Password}
		if o.Username != "" {
			args = []string{"AUTH", o.Username, o.Password}
		}
		if err := expectOK(args...); err != nil {
			c.Close()
			return nil, nil, err
		}
	}
	if err := expectOK("MONITOR"); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, rd, nil
}

func (m *monitors) start(ctx context.Context, rdb redis.UniversalClient) error {
	m.counts, m.ended = map[string]int64{}, map[string]chan struct{}{}
	var opts []*redis.Options
	if err := eachServer(ctx, rdb, func(_ context.Context, c *redis.Client) error {
		m.mu.Lock()
		opts = append(opts, c.Options())
		m.mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	for _, o := range opts {
		conn, rd, err := monitor(ctx, o)
		if err != nil {
			return fmt.Errorf("MONITOR on %s: %w", o.Addr, err)
		}
		m.conns = append(m.conns, conn)
		c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password})
		m.markers = append(m.markers, c)
		started, ended := make(chan struct{}), make(chan struct{})
		m.ended[o.Addr] = ended
		m.wg.Go(func() {
			counting, done := false, false
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					return // closed by stop
				}
				name, arg, lua, ok := monitorLine(strings.TrimSuffix(strings.TrimPrefix(line, "+"), "\r\n"))
				switch {
				case !ok || done:
				case name == "echo" && arg == markStart:
					if !counting {
						counting = true
						close(started)
					}
				case name == "echo" && arg == markEnd:
					if counting {
						done = true
						close(ended)
					}
				case counting && !lua:
					m.mu.Lock()
					m.counts[name]++
					m.mu.Unlock()
				}
			}
		})
		// Counting starts when MONITOR shows the start mark: nothing sent
		// before it is counted.
		deadline := time.After(10 * time.Second)
	wait:
		for {
			if err := c.Echo(ctx, markStart).Err(); err != nil {
				return err
			}
			select {
			case <-started:
				break wait
			case <-time.After(50 * time.Millisecond):
			case <-deadline:
				return fmt.Errorf("MONITOR on %s: no start mark in 10 s", o.Addr)
			}
		}
	}
	return nil
}

// finish marks the end on every master, waits for the marks and returns
// the counts.
func (m *monitors) finish(ctx context.Context, _ redis.UniversalClient) (map[string]int64, error) {
	for _, c := range m.markers {
		if err := c.Echo(ctx, markEnd).Err(); err != nil {
			return nil, err
		}
		select {
		case <-m.ended[c.Options().Addr]:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("MONITOR on %s: no end mark in 10 s", c.Options().Addr)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.counts))
	for k, v := range m.counts {
		out[k] = v
	}
	return out, nil
}

func (m *monitors) stop() {
	for _, c := range m.conns {
		_ = c.Close()
	}
	for _, c := range m.markers {
		_ = c.Close()
	}
	m.wg.Wait()
}

// countLine formats counts per request, largest first.
func countLine(v map[string]float64) string {
	names := make([]string, 0, len(v))
	var total float64
	for n, c := range v {
		names = append(names, n)
		total += c
	}
	sort.Slice(names, func(i, j int) bool {
		if v[names[i]] != v[names[j]] {
			return v[names[i]] > v[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, 0, len(names))
	for _, n := range names {
		if v[n] >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", strings.ToUpper(n), v[n]))
		}
	}
	return fmt.Sprintf("%.2f (%s)", total, strings.Join(parts, ", "))
}
