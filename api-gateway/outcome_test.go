package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/store"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/tools/testkit/localnet"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// A create that Redis hangs on is never answered "not created" and then
// made when Redis comes back: a client retrying without a key would pay
// twice. Each create during the hang is
// answered 503 "not created" only when that is certain, or 504 with its
// task id when it is not; after the 504's settled_at a query tells, and the
// answer holds. The account is charged for exactly the tasks that exist.
func TestCreateDuringRedisHang(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	base := startGateway(t, srv.URL, map[string]string{
		// The key's account is known without Redis, and the rate limit
		// does not stop the creates before the store.
		"EASEL_AUTH_CACHE_TTL":       "5s",
		"EASEL_RATE_LIMIT_FAIL_OPEN": "true",
		"EASEL_REDIS_TIMEOUT":        "300ms",
	})
	localnet.WaitStatus(t, base+"/readyz", 200, 15*time.Second)
	body := `{"model":"lumen-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`
	ctx := context.Background()
	db := store.NewDB(srv.Client(t), store.Options{})
	accounts := store.NewAccounts(db)
	acct, err := accounts.Authenticate(ctx, devKey)
	if err != nil {
		t.Fatal(err)
	}
	credits := func() int64 {
		a, err := accounts.Get(ctx, acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		return a.Credits
	}
	first := credits()
	if code, _ := post(t, base, body); code != 200 {
		t.Fatalf("create with Redis up: %d", code)
	}
	before := credits()
	price := first - before
	tasks := store.NewTasks(db)
	count := func() int {
		list, _, err := tasks.List(ctx, acct.ID, task.Filter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	beforeTasks := count()

	if err := srv.Proc.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	type unknown struct {
		id      string
		settled time.Time
	}
	var unknowns []unknown
	notCreated := 0
	// The creates go at once: each waits its request's budget and then its
	// undo's, and one after another they outlasted the key's 5 s in the
	// auth cache once the request path's commands were batched (each batch
	// behind a hung one waits for it).
	type answer struct {
		code int
		raw  string
		err  error
	}
	answers := make(chan answer, 4)
	for i := 0; i < 4; i++ {
		go func() {
			code, raw, err := send("POST", base+"/v1/task/create", body)
			answers <- answer{code, raw, err}
		}()
	}
	for i := 0; i < 4; i++ {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		code, raw := a.code, a.raw
		switch code {
		case http.StatusServiceUnavailable:
			if !strings.Contains(raw, "not created") {
				t.Errorf("503 %s", raw)
			}
			notCreated++
		case http.StatusGatewayTimeout:
			var env struct {
				Data struct {
					TaskID    string `json:"task_id"`
					Outcome   string `json:"outcome"`
					SettledAt int64  `json:"settled_at"`
				} `json:"data"`
			}
			if err := json.Unmarshal([]byte(raw), &env); err != nil || env.Data.TaskID == "" || env.Data.Outcome != "unknown" || env.Data.SettledAt == 0 {
				t.Fatalf("504 %s (%v): want its task id, outcome unknown and settled_at", raw, err)
			}
			unknowns = append(unknowns, unknown{env.Data.TaskID, time.UnixMilli(env.Data.SettledAt)})
		default:
			t.Fatalf("create with Redis hung: %d %s", code, raw)
		}
	}
	// Redis comes back after every answer's outcome is settled, with the
	// creates and undos still in its buffers: it runs them now.
	last := paused
	for _, u := range unknowns {
		if u.settled.After(last) {
			last = u.settled
		}
	}
	time.Sleep(time.Until(last) + 500*time.Millisecond)
	if err := srv.Proc.Resume(); err != nil {
		t.Fatal(err)
	}
	localnet.WaitStatus(t, base+"/readyz", 200, 10*time.Second)
	time.Sleep(200 * time.Millisecond)

	made := 0
	for _, u := range unknowns {
		code := answered(t, base, "/v1/task/query?task_id="+u.id)
		if code != 200 && code != 404 {
			t.Fatalf("query of %s after settled_at: %d", u.id, code)
		}
		if code == 200 {
			made++
		}
		// The answer holds.
		time.Sleep(100 * time.Millisecond)
		if again := answered(t, base, "/v1/task/query?task_id="+u.id); again != code {
			t.Errorf("query of %s: %d, then %d", u.id, code, again)
		}
	}
	t.Logf("during the hang: %d not created, %d unknown (%d of them made)", notCreated, len(unknowns), made)
	if n := count(); n != beforeTasks+made {
		t.Errorf("%d tasks after the hang; want %d (%d before, %d answered unknown and found): a create answered 'not created' was made", n, beforeTasks+made, beforeTasks, made)
	}
	if spent := before - credits(); spent != price*int64(made) {
		t.Errorf("charged %d credits during the hang for %d tasks made at %d each", spent, made, price)
	}
}

func post(t *testing.T, base, body string) (int, string) {
	t.Helper()
	return do(t, "POST", base+"/v1/task/create", body)
}

// answered queries path until the gateway answers other than 503 (Redis,
// catching up after the hang on a loaded machine, slower than the
// gateway's Redis timeout: a client asks again), for at most 10 s.
func answered(t *testing.T, base, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		code, _ := query(t, base, path)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code
		}
	}
}

func query(t *testing.T, base, path string) (int, string) {
	t.Helper()
	return do(t, "GET", base+path, "")
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	code, raw, err := send(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, raw
}

// send is do for another goroutine than the test's.
func send(method, url, body string) (int, string, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+devKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
