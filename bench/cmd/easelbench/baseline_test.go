package main

import (
	"context"
	"testing"
	"time"

	"github.com/easelhq/easel/tools/loadgen"
	"github.com/easelhq/easel/tools/testkit/redistest"
)

// TestBaselines runs both baselines briefly, on one server and on a Redis
// Cluster (--redis cluster): they must answer in the shapes the load
// generator reads, or `make bench` would measure errors.
func TestBaselines(t *testing.T) {
	t.Run(redisSingle, func(t *testing.T) { testBaselines(t, redistest.Start(t).URL) })
	t.Run(redisCluster, func(t *testing.T) { testBaselines(t, redistest.StartCluster(t).URL) })
}

func testBaselines(t *testing.T, redisURL string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr()
	done := make(chan error, 1)
	go func() { done <- runBaselineGateway(ctx, addr, redisURL) }()
	if err := waitHTTP(ctx, "http://"+addr+"/v1/task/query?task_id=x", nil); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{loadgen.ModeCreate, loadgen.ModeQuery} {
		rep, err := loadgen.Run(ctx, loadgen.Config{BaseURL: "http://" + addr, Keys: []string{"k"}, Mode: mode, Concurrency: 4, Requests: 50,
			QueryTasks: 10, Mix: []loadgen.MixEntry{{Model: "lumen-2.5-flash-image", Weight: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		op := map[string]string{loadgen.ModeCreate: loadgen.OpCreate, loadgen.ModeQuery: loadgen.OpQuery}[mode]
		if o := rep.Ops[op]; o == nil || o.OK != 50 || o.Errors != 0 {
			t.Errorf("%s against the baseline: %+v", mode, o)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("baseline gateway: %v", err)
	}

	// The worker baseline drains what the create baseline queued.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := runBaselineWorker(wctx, redisURL, 60, 4, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if wctx.Err() != nil {
		t.Error("the worker baseline did not process the 60 queued jobs")
	}
}
