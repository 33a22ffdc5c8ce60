package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/tools/testkit/localnet"
)

// scrapeMetrics reads a /metrics endpoint in Prometheus's text format into
// one value per series, keyed as the format writes it:
// name{label="value",...}.
func scrapeMetrics(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("%s: a line of no value: %q", url, line)
		}
		out[line[:i]] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectMetrics scrapes until every series in want has its value (a task's
// end is visible to its client a moment before its worker counts it), and
// reports the ones that never did.
func expectMetrics(t *testing.T, what string, scrape func() map[string]float64, want map[string]float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := scrape()
		var wrong []string
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				wrong = append(wrong, fmt.Sprintf("%s = %v (present: %v); want %v", k, g, ok, v))
			}
		}
		if len(wrong) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			sort.Strings(wrong)
			t.Errorf("%s metrics:\n  %s", what, strings.Join(wrong, "\n  "))
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsEndToEnd runs tasks through the gateway and two workers, some
// failing and refunded, then scrapes the gateway's operations listener and
// the workers' health listeners: each counter moved by exactly what was
// done, and credits debited and refunded equal the ledger's.
func TestMetricsEndToEnd(t *testing.T) {
	t.Parallel()
	ops := localnet.FreeAddr(t)
	s := startStack(t, stackOptions{workers: 2, simDelay: 50 * time.Millisecond, env: map[string]string{"EASEL_METRICS_ADDR": ops}})
	acct, key := s.newAccount(t, account.Spec{Name: "metrics", Credits: 10_000, RateLimit: 1000, MaxInflight: 100})
	src := sourceServer(t)
	c := newClient(t, s.base, key)

	tasks := []struct {
		body, status string
	}{
		{createBody(std, `{"prompt":"one"}`), "completed"},
		{createBody(std, `{"prompt":"two","aspect_ratio":"16:9"}`), "completed"},
		{createBody(std, `{"prompt":"three"}`), "completed"},
		{createBody(std, `{"prompt":"an edit","image_urls":["`+src.URL+`/640x360.png"]}`), "completed"},
		{createBody(std, `{"prompt":"a source that is not there","image_urls":["`+src.URL+`/0x0.png"]}`), "failed"},
		{createBody(std, `{"prompt":"nor here","image_urls":["`+src.URL+`/0x1.png"]}`), "failed"},
		{createBody(pro, `{"prompt":"four","image_size":"2K"}`), "completed"},
		{createBody(pro, `{"prompt":"five","image_size":"2K"}`), "completed"},
		{createBody(pro, `{"prompt":"a 4K edit of nothing","image_size":"4K","image_urls":["`+src.URL+`/0x0.png"]}`), "failed"},
	}
	var wg sync.WaitGroup
	for _, tk := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := c.create(tk.body)
			if rec, _, _ := c.poll(id, 60*time.Second); rec.Status != tk.status {
				t.Errorf("task %s %s: %+v; want %s", id, rec.Status, rec.Error, tk.status)
			}
		}()
	}
	wg.Wait()
	// Refused: no key, an unknown model.
	if st, _, _ := newClient(t, s.base, "").do("POST", "/v1/task/create", createBody(std, `{"prompt":"x"}`), nil); st != 401 {
		t.Errorf("create without a key: %d", st)
	}
	if st, _, _ := c.do("POST", "/v1/task/create", createBody("nope", `{"prompt":"x"}`), nil); st != 400 {
		t.Errorf("create of an unknown model: %d", st)
	}
	if t.Failed() {
		return
	}

	// The ledger: 9 debits (6 standard at 4, 2 pro 2K at 18, 1 pro 4K at
	// 24) and 3 refunds (2 standard, the pro 4K).
	entries, err := s.accounts.Ledger(context.Background(), acct, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ledgerDebits, ledgerRefunds float64
	for _, e := range entries {
		switch e.Kind {
		case account.Debit:
			ledgerDebits -= float64(e.Amount)
		case account.Refund:
			ledgerRefunds += float64(e.Amount)
		}
	}
	if ledgerDebits != 6*4+2*18+24 || ledgerRefunds != 2*4+24 {
		t.Fatalf("ledger: %v debited, %v refunded", ledgerDebits, ledgerRefunds)
	}

	gw := expectMetrics(t, "gateway", func() map[string]float64 { return scrapeMetrics(t, "http://"+ops+"/metrics") }, map[string]float64{
		`easel_tasks_created_total{model="` + std + `",outcome="created"}`:                 6,
		`easel_tasks_created_total{model="` + pro + `",outcome="created"}`:                 3,
		`easel_tasks_created_total{model="unknown",outcome="invalid"}`:                     1,
		`easel_tasks_created_total{model="` + std + `",outcome="insufficient_credits"}`:    0,
		`easel_auth_refusals_total{reason="missing"}`:                                      1,
		`easel_auth_refusals_total{reason="invalid"}`:                                      0,
		`easel_rate_limit_refusals_total{limit="create"}`:                                  0,
		`easel_credits_debited_total{model="` + std + `"}`:                                 6 * 4,
		`easel_credits_debited_total{model="` + pro + `"}`:                                 2*18 + 24,
		`easel_http_requests_total{code="200",method="POST",route="/v1/task/create"}`:      9,
		`easel_http_requests_total{code="400",method="POST",route="/v1/task/create"}`:      1,
		`easel_http_requests_total{code="401",method="POST",route="/v1/task/create"}`:      1,
		`easel_http_request_duration_seconds_count{method="POST",route="/v1/task/create"}`: 11,
	})
	if d := gw[`easel_credits_debited_total{model="`+std+`"}`] + gw[`easel_credits_debited_total{model="`+pro+`"}`]; d != ledgerDebits {
		t.Errorf("credits debited %v; the ledger says %v", d, ledgerDebits)
	}
	for k := range gw {
		if strings.HasPrefix(k, "easel_http_requests_total{") && strings.Contains(k, "task_") {
			t.Errorf("a raw path in a route label: %s", k)
		}
	}
	if _, ok := gw["go_goroutines"]; !ok {
		t.Error("the gateway exports no go_* metrics")
	}

	// The workers, summed: each task ran on one of them.
	workers := func() map[string]float64 {
		sum := map[string]float64{}
		for _, a := range s.workerAddr {
			for k, v := range scrapeMetrics(t, "http://"+a+"/metrics") {
				sum[k] += v
			}
		}
		return sum
	}
	wk := expectMetrics(t, "workers", workers, map[string]float64{
		`easel_tasks_finished_total{code="",model="` + std + `",outcome="completed"}`:                 4,
		`easel_tasks_finished_total{code="",model="` + pro + `",outcome="completed"}`:                 2,
		`easel_tasks_finished_total{code="source_fetch_failed",model="` + std + `",outcome="failed"}`: 2,
		`easel_tasks_finished_total{code="source_fetch_failed",model="` + pro + `",outcome="failed"}`: 1,
		`easel_credits_refunded_total{model="` + std + `"}`:                                           2 * 4,
		`easel_credits_refunded_total{model="` + pro + `"}`:                                           24,
		`easel_task_queue_wait_seconds_count{model="` + std + `"}`:                                    6,
		`easel_task_queue_wait_seconds_count{model="` + pro + `"}`:                                    3,
		`easel_task_stage_duration_seconds_count{model="` + std + `",stage="fetch"}`:                  1,
		`easel_task_stage_duration_seconds_count{model="` + std + `",stage="generate"}`:               4,
		`easel_task_stage_duration_seconds_count{model="` + pro + `",stage="generate"}`:               2,
		`easel_task_stage_duration_seconds_count{model="` + std + `",stage="store"}`:                  4,
		`easel_task_stage_duration_seconds_count{model="` + pro + `",stage="store"}`:                  2,
		`easel_upstream_requests_total{outcome="ok",provider="procedural"}`:                           6,
		`easel_upstream_request_duration_seconds_count{provider="procedural"}`:                        6,
		`easel_task_retries_total{model="` + std + `"}`:                                               0,
		`easel_generations_in_flight{model="` + std + `"}`:                                            0,
		`easel_generations_in_flight{model="` + pro + `"}`:                                            0,
		// Asynq's queue figures, the same from each worker: two workers
		// report twice the count.
		`asynq_queue_size{queue="standard"}`:            0,
		`asynq_queue_size{queue="pro"}`:                 0,
		`asynq_tasks_processed_total{queue="standard"}`: 2 * 6,
		`asynq_tasks_processed_total{queue="pro"}`:      2 * 3,
		`asynq_tasks_failed_total{queue="standard"}`:    0,
	})
	if r := wk[`easel_credits_refunded_total{model="`+std+`"}`] + wk[`easel_credits_refunded_total{model="`+pro+`"}`]; r != ledgerRefunds {
		t.Errorf("credits refunded %v; the ledger says %v", r, ledgerRefunds)
	}

	// The operations listener answers probes too; the API keeps /metrics
	// to itself.
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, err := http.Get("http://" + ops + p); err != nil || resp.StatusCode != 200 {
			t.Errorf("operations %s: %v %v", p, err, resp)
		} else {
			resp.Body.Close()
		}
	}
	if st, _, _ := newClient(t, s.base, "").do("GET", "/metrics", "", nil); st != 404 {
		t.Errorf("API /metrics: %d; want 404 (EASEL_METRICS_ON_API is off)", st)
	}
}
