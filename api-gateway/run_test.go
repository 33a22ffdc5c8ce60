package gateway

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/redis/go-redis/v9"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/configtest"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

const devKey = "esk_run_test_dev_key_0123456789abcdefghij"

// startGateway runs the gateway on redisURL with env added, and returns its
// base URL once it listens (not necessarily ready).
func startGateway(t *testing.T, redisURL string, env map[string]string) string {
	t.Helper()
	return startGatewayWith(t, redisURL, env, nil)
}

// startGatewayWith is startGateway running the gateway with serve (nil:
// Run).
func startGatewayWith(t *testing.T, redisURL string, env map[string]string, serve func(context.Context, Config, net.Listener) error) string {
	t.Helper()
	ln := localnet.Listen(t)
	base := map[string]string{
		"EASEL_REDIS_URL":      redisURL,
		"EASEL_BLOB_URL":       "file://" + t.TempDir(),
		"EASEL_HTTP_ADDR":      ln.Addr().String(),
		"EASEL_SIGNING_SECRET": strings.Repeat("s", 32),
		"EASEL_DEV_MODE":       "true",
		"EASEL_DEV_API_KEY":    devKey,
		"EASEL_LOG_LEVEL":      "error",
		// Off: gateways of tests running at once would all claim :9090.
		"EASEL_METRICS_ADDR": "",
	}
	cfg := configtest.Load(t, LoadConfig, base, env)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if serve == nil {
			serve = func(ctx context.Context, cfg Config, ln net.Listener) error {
				return Run(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), ln)
			}
		}
		err := serve(ctx, cfg, ln)
		if ctx.Err() == nil { // stopped on its own: say why, before a wait on it fails
			t.Logf("the gateway stopped before its test ended: %v", err)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	return "http://" + ln.Addr().String()
}

var client = &http.Client{Timeout: 10 * time.Second}

func status(t *testing.T, method, url, body string) (int, http.Header, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+devKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header, time.Since(start)
}

// Readiness reflects a failed write: a Redis that answers PING but refuses
// writes (a replica after a failover) takes the gateway out of rotation.
func TestReadinessNeedsWrites(t *testing.T) {
	srv := redistest.Start(t)
	base := startGateway(t, srv.URL, nil)
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	srv.RefuseWrites(t)
	localnet.WaitStatus(t, base+"/readyz", 503, 5*time.Second)
	if code, hdr, _ := status(t, "GET", base+"/readyz", ""); code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("readyz %d, Retry-After %q", code, hdr.Get("Retry-After"))
	}
	if code, _, _ := status(t, "GET", base+"/healthz", ""); code != 200 {
		t.Errorf("healthz %d: liveness does not depend on Redis", code)
	}
	srv.AcceptWrites(t)
	localnet.WaitStatus(t, base+"/readyz", 200, 5*time.Second)
}

// A hung Redis (SIGSTOP) costs a request a 503 with Retry-After within the
// request's budget, not the 30 s and more it took before; so does a Redis
// that is gone.
func TestRedisFaultsFailFast(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	base := startGateway(t, srv.URL, map[string]string{"EASEL_AUTH_CACHE_TTL": "0s"}) // the default Redis timeout
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	body := `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`
	// With Redis up a create succeeds (asked again on a 503: a loaded
	// machine's Redis can outlast the default timeout once).
	code := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		if code, _, _ = status(t, "POST", base+"/v1/task/create", body); code == 200 || time.Now().After(deadline) {
			break
		}
	}
	if code != 200 {
		t.Fatalf("create with Redis up: %d", code)
	}
	for _, fault := range []struct {
		name         string
		break_, heal func() error
	}{
		{"hung", srv.Proc.Pause, srv.Proc.Resume},
		{"gone", srv.Proc.Down, srv.Proc.Restart},
	} {
		t.Run(fault.name, func(t *testing.T) {
			if err := fault.break_(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := fault.heal(); err != nil {
					t.Fatal(err)
				}
			}()
			for _, r := range []struct{ method, path, body string }{
				{"POST", "/v1/task/create", body},
				{"GET", "/v1/task/query?task_id=task_lumen_1", ""},
			} {
				code, hdr, took := status(t, r.method, base+r.path, r.body)
				if code != 503 || hdr.Get("Retry-After") == "" {
					t.Errorf("%s %s with Redis %s: %d (Retry-After %q) after %s; want 503 with Retry-After", r.method, r.path, fault.name, code, hdr.Get("Retry-After"), took)
				}
				t.Logf("%s %s with Redis %s: %d after %s", r.method, r.path, fault.name, code, took)
			}
			if code, _, _ := status(t, "GET", base+"/readyz", ""); code != 503 {
				t.Errorf("readyz %d with Redis %s", code, fault.name)
			}
		})
	}
	// Healed: the gateway serves again, without a restart.
	localnet.WaitStatus(t, base+"/readyz", 200, 10*time.Second)
	if code, _, _ := status(t, "POST", base+"/v1/task/create", body); code != 200 {
		t.Errorf("create after Redis came back: %d", code)
	}
}

// Started before its Redis, the gateway waits for it (live, not ready)
// instead of exiting, and serves once it comes.
func TestStartsBeforeRedis(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Proc.Down(); err != nil {
		t.Fatal(err)
	}
	base := startGateway(t, srv.URL, map[string]string{"EASEL_REDIS_START_TIMEOUT": "60s"})
	localnet.WaitStatus(t, base+"/healthz", 200, 10*time.Second)
	// Not ready all through go-redis's first dial retries (about 1.9 s)
	// and past them.
	localnet.HoldsStatus(t, base+"/readyz", 503, 2500*time.Millisecond)
	if err := srv.Proc.Restart(); err != nil {
		t.Fatal(err)
	}
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	// The dev key, set up once Redis came, works.
	accounts := store.NewAccounts(store.NewDB(srv.Client(t), store.Options{}))
	if _, err := accounts.Authenticate(context.Background(), devKey); err != nil {
		t.Errorf("dev key after a late Redis: %v", err)
	}
}

// The API listener holds one client to EASEL_MAX_CONNS_PER_CLIENT open
// connections; its next is closed at once.
func TestGatewayCapsConnectionsPerClient(t *testing.T) {
	srv := redistest.Start(t)
	base := startGateway(t, srv.URL, map[string]string{"EASEL_MAX_CONNS_PER_CLIENT": "5"})
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	addr := strings.TrimPrefix(base, "http://")
	// From an address of its own, so that no other connection of the test
	// (its readiness polls) counts against the cap.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	if c, err := d.Dial("tcp", addr); err != nil {
		t.Skipf("no third loopback address: %v", err)
	} else {
		c.Close()
		time.Sleep(50 * time.Millisecond) // let the server see it closed
	}
	for i := 0; i < 5; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")) // never finished
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n > 0 || err == nil {
		t.Errorf("the sixth connection was served (%d bytes, %v)", n, err)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the sixth connection was left open instead of closed")
	}
}

func TestConnCaps(t *testing.T) {
	for _, tt := range []struct {
		max, perClient, perNetwork int
		files                      uint64
		total                      int
	}{
		{0, 512, 2048, 1 << 20, 100_000},
		{0, 512, 2048, 1024, 921},
		{0, 0, 0, 0, 100_000},
		{2000, 10, 40, 1024, 2000},
	} {
		c := Config{MaxConns: tt.max, MaxConnsPerClient: tt.perClient, MaxConnsPerNetwork: tt.perNetwork}
		got := c.connCaps(tt.files)
		if got.Total != tt.total || got.PerClient != tt.perClient || got.PerNetwork != tt.perNetwork || got.FirstByte <= 0 {
			t.Errorf("caps(%+v, files %d) = %+v; want total %d, per client %d, per network %d, a first-byte timeout", tt, tt.files, got, tt.total, tt.perClient, tt.perNetwork)
		}
	}
}

// With EASEL_REDIS_MIN_REPLICAS, a create no replica confirms is undone and
// answered 503 with Retry-After; once a replica follows, creates succeed.
func TestCreateWaitsForReplicas(t *testing.T) {
	srv := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	base := startGateway(t, srv.URL, map[string]string{"EASEL_REDIS_MIN_REPLICAS": "1"})
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	rdb := srv.Client(t)
	db := store.NewDB(rdb, store.Options{})
	accounts, tasks := store.NewAccounts(db), store.NewTasks(db)
	ctx := context.Background()
	acct, err := accounts.Authenticate(ctx, devKey)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`
	code, hdr, _ := status(t, "POST", base+"/v1/task/create", body)
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("create with no replica: %d, Retry-After %q; want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	if a, _ := accounts.Get(ctx, acct.ID); a.Credits != acct.Credits {
		t.Errorf("balance %d after an unconfirmed create; want %d (undone)", a.Credits, acct.Credits)
	}
	if n, err := taskRecords(ctx, rdb, tasks, acct.ID); err != nil || n != 0 {
		t.Errorf("%d task records after an unconfirmed create (%v); want none", n, err)
	}

	_, port, _ := net.SplitHostPort(srv.Addr)
	redistest.Start(t, "--replicaof", "127.0.0.1", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := status(t, "POST", base+"/v1/task/create", body)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create with a replica: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The confirmed create left its record, as taskRecords counts it.
	if n, err := taskRecords(ctx, rdb, tasks, acct.ID); err != nil || n != 1 {
		t.Errorf("%d task records after a confirmed create (%v); want 1", n, err)
	}
}

// On a Redis Cluster the gateway serves, and is not ready while the
// cluster is down (a master gave up a slot) though every node answers PING.
func TestReadinessOnACluster(t *testing.T) {
	c := redistest.StartCluster(t)
	base := startGateway(t, c.URL, nil)
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	body := `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`
	if code, _, _ := status(t, "POST", base+"/v1/task/create", body); code != 200 {
		t.Fatalf("create on a cluster: %d", code)
	}
	n0 := redis.NewClient(&redis.Options{Addr: c.Addrs[0]})
	defer n0.Close()
	if err := n0.ClusterDelSlots(context.Background(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	localnet.WaitStatus(t, base+"/readyz", 503, 5*time.Second)
	if code, _, _ := status(t, "GET", base+"/healthz", ""); code != 200 {
		t.Errorf("healthz %d: liveness does not depend on Redis", code)
	}
	if err := n0.ClusterAddSlots(context.Background(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	localnet.WaitStatus(t, base+"/readyz", 200, 10*time.Second)
}

// taskRecords counts the task records of an account, paging its listing:
// the create script writes a record and its index entry in one step, and
// an undo removes both in one step, so the listing sees every record.
func taskRecords(ctx context.Context, _ *redis.Client, tasks *store.Tasks, accountID string) (int, error) {
	n, cursor := 0, ""
	for {
		page, next, err := tasks.List(ctx, accountID, task.Filter{Limit: 100, Cursor: cursor})
		if err != nil {
			return n, err
		}
		n += len(page)
		if next == "" {
			return n, nil
		}
		cursor = next
	}
}
