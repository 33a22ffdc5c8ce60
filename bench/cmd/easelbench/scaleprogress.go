package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// The progress sub-part: what a long generation with progress costs Redis
// in all, through the real services. --scale-progress tasks of the pro
// model, each a generation of twice --scale-progress-delay
// (EASEL_SIM_DELAY; the procedural generator reports its progress in 8
// steps), all in flight at once (EASEL_WORKER_CONCURRENCY and no fair
// share), their jobs held in paused queues until all are created:
//   - commands per task: INFO commandstats' calls from before the creates
//     to after the last task completed, Asynq's and the recovery's
//     included, less the idle services' floor measured before (its rate
//     times the time taken), over the tasks. The benchmark's own polls (one
//     query a second, a few Inspector reads) are counted in: about one
//     command a second, under 0.1 a task at 1,000 tasks;
//   - progress writes per task: commandstats' PUBLISH calls over the tasks,
//     less the two of the start and the end (each change of a task is
//     published once, for streams and waits: the zero-delay drain counts
//     exactly 2 a task); and, on progressSamples of the tasks, the rises of
//     progress GET /v1/task/stream showed (a stream reads the record when
//     told of a change, so writes a few ms apart, such as the last
//     milestones before the end, can show as one: a lower bound).

const (
	progressSamples = 10
	// progressSettle is how long the count runs on after the last task
	// completed: the worker acknowledges a job to Asynq after its task is
	// recorded completed.
	progressSettle = time.Second
	// Targets.
	progressTargetWrites   = 10 // a task, at most
	progressTargetCommands = 60 // a task, at most
	scaleProModel          = "lumen-3-pro-image-preview"
)

// scaleProgressBody is the create request's body: one pro 1:1 picture, the
// same one every time (the generator paints it once).
var scaleProgressBody = []byte(`{"model":"` + scaleProModel + `","task_type":"image","input":{"prompt":"` + scaleCreatePrompt + `","aspect_ratio":"1:1"}}`)

// scaleProgress is the progress sub-part's figures.
type scaleProgress struct {
	Tasks int `json:"tasks"`
	// GenerationS is how long each generation takes (twice
	// --scale-progress-delay: the pro model).
	GenerationS float64     `json:"generation_s"`
	Create      scaleCreate `json:"create"`
	// FloorPerS is the idle services' commands a second, measured before.
	FloorPerS float64 `json:"floor_commands_per_s"`
	// LifeS runs from the first create to the last completion and the
	// settle after it.
	LifeS float64 `json:"life_s"`
	// Commands are commandstats' calls over LifeS; CommandsPerTask those
	// less the floor, over the tasks; ByCommand per task, by command (the
	// floor not taken out).
	Commands        int64              `json:"redis_commands"`
	CommandsPerTask float64            `json:"redis_commands_per_task"`
	ByCommand       map[string]float64 `json:"redis_commands_per_task_by_command"`
	// WritesPerTask is the progress writes a task, from PUBLISH; Writes
	// the rises each sampled task's stream showed.
	WritesPerTask float64 `json:"progress_writes_per_task"`
	Writes        []int   `json:"progress_writes_sampled"`
	MaxWrites     int     `json:"progress_writes_sampled_max"`
	// Curve is one sampled task's progress as its stream showed it.
	Curve []int `json:"progress_curve_sample"`
}

func (e *env) scaleProgressPart(ctx context.Context, sr *scaleResult) error {
	o := e.o
	n := int(o.scaleProgress)
	p := &scaleProgress{Tasks: n, GenerationS: 2 * o.scaleProgressDelay.Seconds()}
	s, err := e.startScale(ctx, true, []string{"EASEL_ACCOUNT_MAX_RUNNING=0"},
		[]string{"EASEL_ACCOUNT_MAX_RUNNING=0", "EASEL_SIM_DELAY=" + o.scaleProgressDelay.String(), "EASEL_WORKER_CONCURRENCY=" + strconv.Itoa(max(n, 1))})
	if err != nil {
		return err
	}
	defer s.stop()
	accts, _, err := createAccounts(ctx, s.admin, "progress", 1, 1, 1, 1_000_000_000_000, 1_000_000)
	if err != nil {
		return err
	}
	key := accts[0].keys[0]
	floor, err := e.measure(ctx, s, o.scaleMeasure)
	if err != nil {
		return err
	}
	p.FloorPerS = floor.CommandsPerS
	e.logf("  the floor: %s", floor)

	a, err := readRedisCounters(ctx, e.rdb)
	if err != nil {
		return err
	}
	t0 := time.Now()
	ids := make([]string, n)
	// The samples first, so their streams start before the queues run.
	samples := min(progressSamples, n)
	for i := range samples {
		if ids[i], err = createOne(ctx, s, key, scaleProgressBody); err != nil {
			return err
		}
	}
	curves := make([][]int, samples)
	streamErrs := make([]error, len(curves))
	var streams sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(p.GenerationS*float64(time.Second)))
	defer cancel()
	for i := range curves {
		streams.Go(func() { curves[i], streamErrs[i] = streamProgress(sctx, s, key, ids[i]) })
	}
	var rest scaleCreate
	if n > samples {
		if rest, err = e.createScaleTasks(ctx, s, []string{key}, []int{n - samples}); err != nil {
			return err
		}
	}
	p.Create = scaleCreate{Tasks: n, Seconds: time.Since(t0).Seconds(), Retries: rest.Retries}
	p.Create.PerS = float64(n) / p.Create.Seconds
	if err := e.pauseQueues(false); err != nil {
		return err
	}
	e.logf("  %d tasks created in %.1f s; the queues resumed", n, p.Create.Seconds)
	if err := e.waitQueuesEmpty(ctx, s, key, ids[0], time.Duration(p.GenerationS*float64(time.Second))+5*time.Minute); err != nil {
		return err
	}
	if err := sleepCtx(ctx, progressSettle); err != nil {
		return err
	}
	b, err := readRedisCounters(ctx, e.rdb)
	if err != nil {
		return err
	}
	p.LifeS = time.Since(t0).Seconds()
	streams.Wait()
	for i, err := range streamErrs {
		if err != nil {
			return fmt.Errorf("the stream of %s: %w", ids[i], err)
		}
	}
	// The first read's INFO commandstats, and the second's INFO cpu.
	own := int64(2 * b.servers)
	p.Commands = max(b.total-a.total-own, 0)
	p.CommandsPerTask = (float64(p.Commands) - p.FloorPerS*p.LifeS) / float64(n)
	b.calls["info"] -= own
	p.ByCommand = map[string]float64{}
	for k, v := range b.calls {
		if d := v - a.calls[k]; d > 0 {
			p.ByCommand[k] = float64(d) / float64(n)
		}
	}
	p.WritesPerTask = p.ByCommand["publish"] - 2
	for _, c := range curves {
		w := progressWrites(c)
		p.Writes = append(p.Writes, w)
		p.MaxWrites = max(p.MaxWrites, w)
	}
	p.Curve = curves[0]
	completed := 0
	if err := listCompleted(ctx, s, key, func(taskRecord) { completed++ }); err != nil {
		return err
	}
	if completed != n {
		return fmt.Errorf("%d of %d tasks completed", completed, n)
	}
	e.logf("  %d generations of %.0f s in %.1f s: %.1f Redis commands a task (%d in all, a floor of %.1f/s taken out); %.2f progress writes a task, the samples' streams showed %v, one's curve %v",
		n, p.GenerationS, p.LifeS, p.CommandsPerTask, p.Commands, p.FloorPerS, p.WritesPerTask, p.Writes, p.Curve)
	sr.Progress = p
	return nil
}

// waitQueuesEmpty waits until the task probe has ended (a query a second)
// and then the image queues hold nothing (Asynq's Inspector).
func (e *env) waitQueuesEmpty(ctx context.Context, s *scaleSvc, key, probe string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	ended := false
	for {
		if err := sleepCtx(ctx, time.Second); err != nil {
			return err
		}
		if err := s.checkAlive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the tasks not done after %s", timeout)
		}
		if !ended {
			st, err := queryStatus(ctx, s, key, probe)
			if err != nil {
				return err
			}
			if ended = st == "completed" || st == "failed"; !ended {
				continue
			}
		}
		if queuedJobs(insp) == 0 {
			return nil
		}
	}
}

// streamProgress follows a task's stream to its end and returns the
// progress of each event while the task was processing (the first event,
// the record as it was, included when processing).
func streamProgress(ctx context.Context, s *scaleSvc, key, id string) ([]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/v1/task/stream?task_id="+url.QueryEscape(id), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	// Not s.client: its timeout would end a stream that outlives it.
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var curve []int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var t struct {
			Status   string `json:"status"`
			Progress int    `json:"progress"`
		}
		if err := json.Unmarshal([]byte(data), &t); err != nil {
			return nil, fmt.Errorf("event %q: %w", data, err)
		}
		switch t.Status {
		case "processing":
			curve = append(curve, t.Progress)
		case "completed":
			return curve, nil
		case "failed", "canceled":
			return nil, fmt.Errorf("the task %s", t.Status)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the stream ended before the task did")
}

// progressWrites counts the rises in a processing task's progress: the
// writes of progress (the start's own write, to processing, is not one).
func progressWrites(curve []int) int {
	n := 0
	for i := 1; i < len(curve); i++ {
		if curve[i] > curve[i-1] {
			n++
		}
	}
	return n
}

// rows adds the progress figures to the results table.
func (p *scaleProgress) rows(w io.Writer) {
	if p == nil {
		return
	}
	name := fmt.Sprintf("scale progress, %d generations of %.0f s", p.Tasks, p.GenerationS)
	fmt.Fprintf(w, "%s: progress writes a task\t%.2f\t\t\t<= %d\t%s\t\n", name, p.WritesPerTask, progressTargetWrites, yes(p.WritesPerTask <= progressTargetWrites))
	fmt.Fprintf(w, "%s: Redis commands a task, all\t%.1f\t\t\t<= %d\t%s\t\n", name, p.CommandsPerTask, progressTargetCommands, yes(p.CommandsPerTask <= progressTargetCommands))
}
