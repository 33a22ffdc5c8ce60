package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/labstack/echo/v4"

	"github.com/easelhq/easel/pkg/redisconn"
)

// The baselines are the floor costs the real services are measured against:
// the least a create (parse the same JSON body, one Asynq enqueue), a query
// (one HGETALL) and a job (raw Asynq processing of a no-op task) can cost on
// this machine, with the same libraries.

const (
	baselineQueue = "bench"
	baselineType  = "bench:noop"
	seededRecords = 1000
)

func seedKey(i int) string { return "bench:t:" + strconv.Itoa(i) }

// runBaselineGateway serves POST /v1/task/create and GET /v1/task/query like
// the gateway's shapes, doing only the floor work.
func runBaselineGateway(ctx context.Context, addr, redisURL string) error {
	rdb, err := redisconn.Open(ctx, redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Records the size of real task records, for the query baseline.
	for i := 0; i < seededRecords; i++ {
		rdb.HSet(ctx, seedKey(i), "type", "image", "model", "lumen-2.5-flash-image", "status", "completed", "progress", 100,
			"ctime", time.Now().UnixMilli(), "etime", time.Now().UnixMilli(), "price", 4,
			"results", `[{"key":"2026112214/task_lumen_2170455969821192122696478843056611060-0-a75d6ee8b6feafeb.png","type":"image/png","size":217887,"w":1344,"h":768}]`)
	}
	// The same Redis client set-up as the gateway's request path.
	ap, err := rdb.AutoPipeline()
	if err != nil {
		return err
	}
	client := asynq.NewClientFromRedisClient(ap)
	var seq atomic.Int64

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/task/create", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		var req struct {
			Model    string `json:"model"`
			TaskType string `json:"task_type"`
			Input    struct {
				Prompt      string   `json:"prompt"`
				AspectRatio string   `json:"aspect_ratio"`
				ImageSize   string   `json:"image_size"`
				ImageURLs   []string `json:"image_urls"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return c.JSON(http.StatusBadRequest, map[string]any{"code": 400, "msg": "bad json", "data": nil})
		}
		id := "task_bench_" + strconv.FormatInt(seq.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano(), 10)
		if _, err := client.EnqueueContext(c.Request().Context(), asynq.NewTask(baselineType, body, asynq.TaskID(id), asynq.Queue(baselineQueue))); err != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"code": 503, "msg": "enqueue failed", "data": nil})
		}
		return c.JSON(http.StatusOK, map[string]any{"code": 200, "msg": "success", "data": map[string]string{"task_id": id}})
	})
	e.GET("/v1/task/query", func(c echo.Context) error {
		h := fnv.New32a()
		_, _ = h.Write([]byte(c.QueryParam("task_id")))
		m, err := ap.HGetAll(c.Request().Context(), seedKey(int(h.Sum32()%seededRecords))).Result()
		if err != nil {
			return err
		}
		// The same shape as the real record, without the checks and the
		// URL signing.
		var results []struct {
			Key string `json:"key"`
		}
		_ = json.Unmarshal([]byte(m["results"]), &results)
		urls := make([]string, len(results))
		for i, r := range results {
			urls[i] = "http://localhost/v1/files/" + r.Key
		}
		progress, _ := strconv.Atoi(m["progress"])
		ctime, _ := strconv.ParseInt(m["ctime"], 10, 64)
		etime, _ := strconv.ParseInt(m["etime"], 10, 64)
		return c.JSON(http.StatusOK, map[string]any{
			"task_id": c.QueryParam("task_id"), "task_type": m["type"], "model": m["model"], "status": m["status"],
			"progress": progress, "create_time": ctime, "complete_time": etime, "results": urls,
		})
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	fmt.Fprintln(os.Stdout, "ready", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// drainResult is what a worker run reports: how many jobs it processed and
// between which times.
type drainResult struct {
	Processed int64 `json:"processed"`
	FirstMs   int64 `json:"first_ms"`
	LastMs    int64 `json:"last_ms"`
}

// runBaselineWorker processes no-op jobs from the bench queue until want
// have been done, then prints a drainResult.
func runBaselineWorker(ctx context.Context, redisURL string, want int64, concurrency int, interval time.Duration) error {
	// The same client set-up as the real worker's.
	rdb, err := redisconn.New(redisURL, redisconn.Options{PoolSize: concurrency + 16})
	if err != nil {
		return err
	}
	defer rdb.Close()
	var res drainResult
	var first, last, done atomic.Int64
	finished := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{baselineQueue: 1},
		TaskCheckInterval: interval,
		LogLevel:          asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(baselineType, func(context.Context, *asynq.Task) error {
		now := time.Now().UnixMilli()
		first.CompareAndSwap(0, now)
		last.Store(now)
		if done.Add(1) == want {
			close(finished)
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	select {
	case <-finished:
	case <-ctx.Done():
	}
	srv.Shutdown()
	res.Processed, res.FirstMs, res.LastMs = done.Load(), first.Load(), last.Load()
	return json.NewEncoder(os.Stdout).Encode(res)
}
