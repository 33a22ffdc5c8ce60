package redisproc

import (
	"context"
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

// Cluster is a running Redis Cluster of masters (no replicas) on loopback.
type Cluster struct {
	// URL is the go-redis ParseClusterURL form:
	// redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=127.0.0.1:P3
	URL   string
	Addrs []string // host:port of each master, in slot order
	// Nodes are the processes, in the order of Addrs. Each runs in its own
	// directory, dir/node-<port>, and keeps its cluster state in
	// nodes-<port>.conf there, so Restart brings a node back into the cluster
	// (with no data unless extra turned persistence on).
	Nodes []*Proc

	busPorts []int // each node's cluster bus port, for CLUSTER MEET
}

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// startTimeout bounds how long StartCluster and StartSentinel wait for the
// servers to agree, once they run.
const startTimeout = 30 * time.Second

// StartCluster starts a Redis Cluster of masters on free loopback ports, with
// persistence off unless extra says otherwise (extra are further
// redis-server arguments for every node, after the cluster's own, so they
// win). The hash slots are split evenly over the masters. It returns once
// every node reports cluster_state:ok and knows all the others: about 2 s,
// because a Redis Cluster master waits 2 s after start-up before it serves.
func StartCluster(dir string, masters int, extra ...string) (*Cluster, error) {
	if masters < 1 || masters > clusterSlots {
		return nil, fmt.Errorf("redis cluster: %d masters: want 1 to %d", masters, clusterSlots)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		nodes, busPorts, err := startClusterNodes(bin, dir, masters, extra)
		if err != nil { // a port clash: try other ports
			lastErr = err
			continue
		}
		c := newCluster(nodes, busPorts)
		if err := c.join(); err != nil {
			c.Stop()
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("redis cluster: %w", lastErr)
}

// startClusterNodes starts the nodes at the same time, each on a free port
// with a free cluster bus port (--cluster-port, so the bus port need not be
// port+10000). On an error it stops those that started.
func startClusterNodes(bin, dir string, masters int, extra []string) (nodes []*Proc, busPorts []int, _ error) {
	ports, err := freePorts(2 * masters)
	if err != nil {
		return nil, nil, err
	}
	nodes = make([]*Proc, masters)
	errs := make([]error, masters)
	var wg sync.WaitGroup
	for i := range nodes {
		port, busPort := ports[2*i], ports[2*i+1]
		busPorts = append(busPorts, busPort)
		wg.Go(func() { nodes[i], errs[i] = startClusterNode(bin, dir, port, busPort, extra) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll(nodes)
		return nil, nil, err
	}
	return nodes, busPorts, nil
}

// startClusterNode starts one node in its own directory under dir, with no
// cluster state left by an earlier run on the same port.
func startClusterNode(bin, dir string, port, busPort int, extra []string) (*Proc, error) {
	ndir := filepath.Join(dir, "node-"+strconv.Itoa(port))
	conf := "nodes-" + strconv.Itoa(port) + ".conf"
	if err := os.MkdirAll(ndir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(ndir, conf)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	args := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-port", strconv.Itoa(busPort),
		"--cluster-config-file", conf,
		"--cluster-node-timeout", "2000",
	}, extra...)
	return startOn(bin, ndir, port, args)
}

func newCluster(nodes []*Proc, busPorts []int) *Cluster {
	c := &Cluster{Nodes: nodes, busPorts: busPorts}
	for _, n := range nodes {
		c.Addrs = append(c.Addrs, n.Addr)
	}
	c.URL = "redis://" + c.Addrs[0]
	for i, a := range c.Addrs[1:] {
		if i == 0 {
			c.URL += "?"
		} else {
			c.URL += "&"
		}
		c.URL += "addr=" + a
	}
	return c
}

// join makes the nodes one cluster: each node gets its range of slots and a
// config epoch of its own (so no epoch collision has to be resolved), then
// every node meets every other (a full mesh: leaving nodes to find each
// other through gossip can take seconds more), and join waits until every
// node says the cluster is ok.
func (c *Cluster) join() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = nodeClient(n.Addr)
		defer clients[i].Close()
	}
	masters := len(c.Nodes)
	for i, rdb := range clients {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("redis cluster: %s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Addrs[i], lo, hi, err)
		}
		// Before any MEET: a node takes an epoch only while it knows no other.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redis cluster: %s: CLUSTER SET-CONFIG-EPOCH %d: %w", c.Addrs[i], i+1, err)
		}
	}
	for i, rdb := range clients {
		for j, n := range c.Nodes {
			if i == j {
				continue
			}
			if err := rdb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, c.busPorts[j]).Err(); err != nil {
				return fmt.Errorf("redis cluster: %s: CLUSTER MEET %s: %w", c.Addrs[i], n.Addr, err)
			}
		}
	}
	want := strconv.Itoa(masters)
	for {
		ready, why := true, ""
		for i, rdb := range clients {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				ready, why = false, fmt.Sprintf("%s: CLUSTER INFO: %v", c.Addrs[i], err)
				break
			}
			state, known := infoField(info, "cluster_state"), infoField(info, "cluster_known_nodes")
			if state != "ok" || known != want {
				ready = false
				why = fmt.Sprintf("%s: cluster_state:%s cluster_known_nodes:%s (want ok and %s)", c.Addrs[i], state, known, want)
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster not ready within %v: %s%s", startTimeout, why, outputs(c.Nodes))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills every node and waits for them. Stopping twice does nothing.
func (c *Cluster) Stop() { stopAll(c.Nodes) }

// nodeClient is a plain client of one server, for set-up and probes: no
// retries, and nothing Redis 7.0 does not know (CLIENT SETINFO).
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:            addr,
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		DialTimeout:     time.Second,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
	})
}

// stopAll stops the processes (nil ones skipped) at the same time.
func stopAll(procs []*Proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p != nil {
			wg.Go(p.Stop)
		}
	}
	wg.Wait()
}

// outputs is what the processes printed, for an error message.
func outputs(procs []*Proc) string {
	var b strings.Builder
	for _, p := range procs {
		if p != nil {
			fmt.Fprintf(&b, "\n--- %s output:\n%s", p.Addr, p.Output())
		}
	}
	return b.String()
}

// freePorts returns n distinct free loopback ports: it holds each listener
// until all are chosen, so the kernel cannot hand out one port twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// infoField is the value of key in the text of INFO or CLUSTER INFO, or ""
// when it is absent.
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimRight(v, "\r\n")
		}
	}
	return ""
}
