package redisproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a primary, its replicas and three sentinels on loopback.
type Sentinel struct {
	// URL is the go-redis ParseFailoverURL form:
	// redis://127.0.0.1:S1?master_name=<name>&addr=127.0.0.1:S2&addr=127.0.0.1:S3
	URL        string
	MasterName string
	// Primary and Replicas are the data nodes as started: after a failover
	// one replica is the primary (PrimaryAddr tells which).
	Primary  *Proc
	Replicas []*Proc
	// Sentinels each run in dir/sentinel-<port> with their config file,
	// sentinel.conf, there; they rewrite it, so Restart brings one back with
	// what it knew.
	Sentinels []*Proc
}

// SentinelMasterName is the name the sentinels monitor the primary under.
const SentinelMasterName = "easel"

// The sentinels' timings: a primary that does not answer for a second is
// down, and a failover that does not finish within 5 s is given up (and, of
// a primary that is down, tried again).
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 5 * time.Second
)

// StartSentinel starts, on free loopback ports, a primary, its replicas (1
// to 4; all with persistence off and --repl-diskless-sync-delay 0; extra are
// further redis-server arguments for every data node, e.g. "--appendonly",
// "yes") and three sentinels monitoring the primary with a quorum of 2. The
// sentinels' config files name each other and the replicas, so they need
// not discover them. It returns once the replicas are in sync and every
// sentinel knows them and the two other sentinels.
func StartSentinel(dir string, replicas int, extra ...string) (*Sentinel, error) {
	if replicas < 1 || replicas > 4 {
		return nil, fmt.Errorf("redis sentinel: %d replicas: want 1 to 4", replicas)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := startSentinelProcs(bin, dir, replicas, extra)
		if err != nil { // a port clash: try other ports
			lastErr = err
			continue
		}
		if err := s.waitReady(); err != nil {
			s.Stop()
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("redis sentinel: %w", lastErr)
}

// startSentinelProcs starts the primary, its replicas, then the three
// sentinels at the same time. On an error it stops those that started.
func startSentinelProcs(bin, dir string, replicas int, extra []string) (*Sentinel, error) {
	ports, err := freePorts(1 + replicas + 3)
	if err != nil {
		return nil, err
	}
	primary, replicaPorts, sentinels := ports[0], ports[1:1+replicas], ports[1+replicas:]
	ids := make([]string, len(sentinels))
	for i := range ids {
		ids[i] = randomID()
	}
	data := append([]string{"--repl-diskless-sync-delay", "0"}, extra...)
	procs := make([]*Proc, len(ports))
	errs := make([]error, len(ports))
	// One after the other: a replica, and a sentinel, that do not reach a
	// server at once try again only a second later (a sentinel by then
	// holds it subjectively down: two such sentinels would fail the primary
	// over).
	procs[0], errs[0] = startDataNode(bin, filepath.Join(dir, "primary-"+strconv.Itoa(primary)), primary, data)
	for i, port := range replicaPorts {
		if errs[0] != nil {
			break
		}
		args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary)}, data...)
		procs[1+i], errs[1+i] = startDataNode(bin, filepath.Join(dir, "replica-"+strconv.Itoa(port)), port, args)
	}
	if err := errors.Join(errs...); err != nil {
		stopAll(procs)
		return nil, err
	}
	var wg sync.WaitGroup
	for i, port := range sentinels {
		var conf strings.Builder
		fmt.Fprintf(&conf, "port %d\nbind 127.0.0.1\n", port)
		fmt.Fprintf(&conf, "sentinel myid %s\n", ids[i])
		conf.WriteString("sentinel resolve-hostnames no\nsentinel announce-ip 127.0.0.1\n")
		name := SentinelMasterName
		fmt.Fprintf(&conf, "sentinel monitor %s 127.0.0.1 %d 2\n", name, primary)
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", name, sentinelDownAfter.Milliseconds())
		fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", name, sentinelFailoverTimeout.Milliseconds())
		fmt.Fprintf(&conf, "sentinel parallel-syncs %s 1\n", name)
		// Pre-seeded: otherwise a sentinel finds the replica in the
		// primary's INFO (polled every 10 s) and the other sentinels in
		// their hello messages (every 2 s).
		for _, port := range replicaPorts {
			fmt.Fprintf(&conf, "sentinel known-replica %s 127.0.0.1 %d\n", name, port)
		}
		for j, other := range sentinels {
			if j != i {
				fmt.Fprintf(&conf, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", name, other, ids[j])
			}
		}
		wg.Go(func() {
			procs[1+replicas+i], errs[1+replicas+i] = startSentinelNode(bin, filepath.Join(dir, "sentinel-"+strconv.Itoa(port)), port, conf.String())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll(procs)
		return nil, err
	}
	s := &Sentinel{MasterName: SentinelMasterName, Primary: procs[0], Replicas: procs[1 : 1+replicas : 1+replicas], Sentinels: procs[1+replicas:]}
	s.URL = "redis://" + s.Sentinels[0].Addr + "?master_name=" + s.MasterName
	for _, p := range s.Sentinels[1:] {
		s.URL += "&addr=" + p.Addr
	}
	return s, nil
}

func startDataNode(bin, dir string, port int, args []string) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return startOn(bin, dir, port, args)
}

// startSentinelNode writes the sentinel's config file (it must be on disk and
// writable: a sentinel saves its state in it) and runs redis-server on it
// with --sentinel.
func startSentinelNode(bin, dir string, port int, conf string) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return startConf(bin, path, dir, port, []string{"--sentinel"})
}

// waitReady waits until the replicas are in sync and every sentinel knows
// them (and has had their INFO, which it needs to pick one in a failover)
// and the two other sentinels.
func (s *Sentinel) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var replicas []*redis.Client
	for _, r := range s.Replicas {
		c := nodeClient(r.Addr)
		defer c.Close()
		replicas = append(replicas, c)
	}
	sentinels := s.clients()
	defer closeAll(sentinels)
	primary := nodeClient(s.Primary.Addr)
	defer primary.Close()
	for {
		why := s.notReady(ctx, replicas, sentinels)
		if why == "" {
			// A replica just in sync may not acknowledge writes for a
			// moment: a service waiting for replicas (WAIT) would be
			// refused its first writes.
			why = acknowledged(ctx, primary, len(s.Replicas))
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis sentinel not ready within %v: %s%s", startTimeout, why, outputs(s.procs()))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// notReady says what is not ready yet, or "".
func (s *Sentinel) notReady(ctx context.Context, replicas []*redis.Client, sentinels []*redis.SentinelClient) string {
	for i, replica := range replicas {
		info, err := replica.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Sprintf("replica %s: INFO: %v", s.Replicas[i].Addr, err)
		}
		if st := infoField(info, "master_link_status"); st != "up" {
			return fmt.Sprintf("replica %s: master_link_status:%s", s.Replicas[i].Addr, st)
		}
	}
	want := strconv.Itoa(len(s.Replicas))
	for i, sc := range sentinels {
		addr := s.Sentinels[i].Addr
		m, err := sc.Master(ctx, s.MasterName).Result()
		if err != nil {
			return fmt.Sprintf("sentinel %s: SENTINEL MASTER: %v", addr, err)
		}
		if m["num-other-sentinels"] != "2" || m["num-slaves"] != want {
			return fmt.Sprintf("sentinel %s: num-other-sentinels=%s num-slaves=%s (want 2 and %s)", addr, m["num-other-sentinels"], m["num-slaves"], want)
		}
		// A runid comes from the replica's INFO: without one, the
		// sentinel would answer a failover with NOGOODSLAVE.
		known, err := sc.Replicas(ctx, s.MasterName).Result()
		if err != nil {
			return fmt.Sprintf("sentinel %s: SENTINEL REPLICAS: %v", addr, err)
		}
		if len(known) != len(s.Replicas) {
			return fmt.Sprintf("sentinel %s: knows %d replicas (want %s)", addr, len(known), want)
		}
		for _, r := range known {
			if r["runid"] == "" || r["flags"] != "slave" {
				return fmt.Sprintf("sentinel %s: replicas %v (want each with flags slave and a runid)", addr, known)
			}
		}
	}
	return ""
}

// acknowledged says why a write on primary is not acknowledged by n
// replicas within 100 ms, or "" when it is.
func acknowledged(ctx context.Context, primary *redis.Client, n int) string {
	var acked *redis.IntCmd
	_, err := primary.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "testkit:sentinel:ready", time.Now().UnixNano(), 0)
		acked = redis.NewIntCmd(ctx, "WAIT", n, 100)
		return p.Process(ctx, acked)
	})
	if err != nil {
		return fmt.Sprintf("primary: SET and WAIT: %v", err)
	}
	if got := acked.Val(); got < int64(n) {
		return fmt.Sprintf("primary: a write acknowledged by %d of %d replicas", got, n)
	}
	return ""
}

// Failover makes the sentinels promote a replica (of their choice) and
// waits until every running sentinel names the same new primary; it returns
// its host:port. SENTINEL FAILOVER does not wait for the replica to catch
// up: writes the old primary acks in the meantime can be lost (use WAIT
// first).
//
// The old primary stays a primary, taking writes, until the sentinels make
// it a replica of the new one, about 10 s later. Promoting it before that
// would throw away what the new primary took in between, so Failover first
// waits until every other data node is a replica in sync of the current
// primary: a Failover right after another takes about 10 s more (give it a
// ctx long enough).
func (s *Sentinel) Failover(ctx context.Context) (newPrimary string, err error) {
	sentinels := s.clients()
	defer closeAll(sentinels)
	old, err := s.primaryAddr(ctx, sentinels)
	if err != nil {
		return "", err
	}
	for _, p := range s.data() {
		if p.Addr == old {
			continue
		}
		if err := waitReplicaOf(ctx, p.Addr, old); err != nil {
			return "", err
		}
	}
	if err := s.startFailover(ctx, sentinels); err != nil {
		return "", err
	}
	// A failover the sentinels give up (its promoted replica not answering
	// within their failover-timeout, as on a loaded machine) leaves the old
	// primary named: once every sentinel still names it twice that timeout
	// after the failover was asked for, it is asked for again.
	asked := time.Now()
	for {
		agreed, why := true, ""
		running, target := 0, ""
		for i, sc := range sentinels {
			if !s.Sentinels[i].running() {
				continue
			}
			running++
			addr, err := getMasterAddr(ctx, sc, s.MasterName)
			if target == "" && err == nil {
				target = addr
			}
			if err != nil || addr == old || addr != target {
				agreed = false
				why = fmt.Sprintf("sentinel %s says %q (%v)", s.Sentinels[i].Addr, addr, err)
				break
			}
		}
		if agreed && running > 0 {
			return target, nil
		}
		if running == 0 {
			why = "no sentinel runs"
		}
		if target == old && time.Since(asked) > 2*sentinelFailoverTimeout && s.allName(ctx, sentinels, old) {
			if err := s.startFailover(ctx, sentinels); err != nil {
				return "", err
			}
			asked = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redis sentinel failover from %s: %w: %s", old, ctx.Err(), why)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// allName reports whether every running sentinel names addr the primary.
func (s *Sentinel) allName(ctx context.Context, sentinels []*redis.SentinelClient, addr string) bool {
	for i, sc := range sentinels {
		if !s.Sentinels[i].running() {
			continue
		}
		if got, err := getMasterAddr(ctx, sc, s.MasterName); err != nil || got != addr {
			return false
		}
	}
	return true
}

// waitReplicaOf waits until the server at addr is a replica of primary, in
// sync with it.
func waitReplicaOf(ctx context.Context, addr, primary string) error {
	rdb := nodeClient(addr)
	defer rdb.Close()
	_, port, _ := net.SplitHostPort(primary)
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		role, link := infoField(info, "role"), infoField(info, "master_link_status")
		if err == nil && role == "slave" && infoField(info, "master_port") == port && link == "up" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis sentinel failover: %s is not a replica of %s in sync (role:%s master_link_status:%s, %v): %w",
				addr, primary, role, link, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startFailover sends SENTINEL FAILOVER to the first running sentinel that
// answers. A failover in progress is fine (it is the one asked for);
// NOGOODSLAVE (no replica the sentinel could promote yet) is tried again
// until ctx ends.
func (s *Sentinel) startFailover(ctx context.Context, sentinels []*redis.SentinelClient) error {
	for {
		lastErr := errors.New("no sentinel runs")
	ask:
		for i, sc := range sentinels {
			if !s.Sentinels[i].running() {
				continue
			}
			err := sc.Failover(ctx, s.MasterName).Err()
			var reply redis.Error
			switch {
			case err == nil, redis.HasErrorPrefix(err, "INPROG"):
				return nil
			case redis.HasErrorPrefix(err, "NOGOODSLAVE"):
				lastErr = fmt.Errorf("sentinel %s: %w", s.Sentinels[i].Addr, err)
				break ask // the others know no better: wait and ask again
			case errors.As(err, &reply):
				return fmt.Errorf("redis sentinel: %s: SENTINEL FAILOVER %s: %w", s.Sentinels[i].Addr, s.MasterName, err)
			default: // it does not answer: ask the next one
				lastErr = fmt.Errorf("sentinel %s: %w", s.Sentinels[i].Addr, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis sentinel: SENTINEL FAILOVER %s: %w (last: %v)", s.MasterName, ctx.Err(), lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PrimaryAddr is the primary's host:port, as the first sentinel that
// answers says.
func (s *Sentinel) PrimaryAddr(ctx context.Context) (string, error) {
	sentinels := s.clients()
	defer closeAll(sentinels)
	return s.primaryAddr(ctx, sentinels)
}

func (s *Sentinel) primaryAddr(ctx context.Context, sentinels []*redis.SentinelClient) (string, error) {
	var errs []error
	for i, sc := range sentinels {
		addr, err := getMasterAddr(ctx, sc, s.MasterName)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", s.Sentinels[i].Addr, err))
	}
	return "", fmt.Errorf("redis sentinel: no primary address: %w", errors.Join(errs...))
}

// Stop kills the sentinels and the data nodes and waits for them. Stopping
// twice does nothing.
func (s *Sentinel) Stop() { stopAll(s.procs()) }

func (s *Sentinel) procs() []*Proc {
	return append(s.data(), s.Sentinels...)
}

// data returns the data nodes: the primary as started and the replicas.
func (s *Sentinel) data() []*Proc {
	return append([]*Proc{s.Primary}, s.Replicas...)
}

func (s *Sentinel) clients() []*redis.SentinelClient {
	cs := make([]*redis.SentinelClient, len(s.Sentinels))
	for i, p := range s.Sentinels {
		cs[i] = redis.NewSentinelClient(&redis.Options{
			Addr:            p.Addr,
			Protocol:        2,
			DisableIdentity: true,
			MaxRetries:      -1,
			DialTimeout:     time.Second,
			ReadTimeout:     time.Second,
			WriteTimeout:    time.Second,
		})
	}
	return cs
}

func closeAll(cs []*redis.SentinelClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

func getMasterAddr(ctx context.Context, sc *redis.SentinelClient, name string) (string, error) {
	hp, err := sc.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %q", name, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// running says whether the process has not exited.
func (p *Proc) running() bool {
	select {
	case err := <-p.exited:
		p.exited <- err // keep it for Stop
		return false
	default:
		return true
	}
}

// randomID is a random 40-hex-digit id, as Redis uses for run and node ids.
func randomID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
