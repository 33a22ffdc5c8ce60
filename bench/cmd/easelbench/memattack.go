package main

// The memory part (--only memory) measures the memory attack:
// one editing task whose --memory-images source images (10) are 16-bit
// RGB PNGs of --memory-side × --memory-side pixels (7071: about 50
// megapixels, 400 MB each decoded as 16-bit RGBA, 4 GB for the ten) of one
// colour, which compress to a few hundred KB each. A loopback server
// serves them (each under its own path, counting its fetches) to one
// bin/worker with EASEL_FETCH_ALLOW_PRIVATE=true and otherwise its own
// defaults (EASEL_DECODE_BUDGET_MB 1024, EASEL_FETCH_MAX_DECODED_MB 400).
// The worker's VmRSS is sampled every 100 ms from the create until the
// task is final and 5 s more (a retry would come then); the figures are
// its peak RSS (the larger of the samples and VmHWM), the task's status and
// failure code, Asynq's retry and archive counts and each image's fetches
// (a retried task fetches again), whether the worker is alive at the end,
// and whether its log says it ran out of memory. The targets: the worker
// alive, its peak RSS under 1 GB (EASEL_DECODE_BUDGET_MB), the task failed
// with invalid_source_image, once, without a retry.

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// memoryMaxRSSMB is the memory part's bound on the worker's peak RSS: the
// decode budget's default.
const memoryMaxRSSMB = 1024

// memoryResult is the memory part's figures.
type memoryResult struct {
	Images     int      `json:"images"`
	Side       int      `json:"side_px"`
	ImageBytes int      `json:"image_bytes"`
	DecodedMB  float64  `json:"decoded_mb_each"` // at 8 bytes a pixel
	WorkerEnv  []string `json:"worker_env"`

	Status      string  `json:"status"`
	FailureCode string  `json:"failure_code,omitempty"`
	FailureMsg  string  `json:"failure_message,omitempty"`
	FinalAfterS float64 `json:"final_after_s"` // create to final, as polled
	// Fetches are each image's fetches, in order.
	Fetches  []int `json:"fetches"`
	Retries  int   `json:"asynq_retry"`
	Archived int   `json:"asynq_archived"`

	PeakRSSMB   float64 `json:"worker_peak_rss_mb"`
	BaseRSSMB   float64 `json:"worker_rss_before_mb"`
	WorkerAlive bool    `json:"worker_alive"`
	// OutOfMemory: the worker's log says "out of memory" or "fatal error".
	OutOfMemory bool `json:"worker_log_out_of_memory"`

	// Samples are VmRSS every 100 ms, in MB, from the create.
	Samples []float64 `json:"rss_samples_mb"`
}

// writeFlatPNG writes a side × side 16-bit RGB PNG of one colour, row by
// row (never holding the image): the pixels image/png writes for an opaque
// image.NRGBA64, without its 400 MB in memory. Deflated at best speed: the
// side the attack uses (7071) is 364 KB so, 292 KB at best compression,
// which takes five times as long to write.
func writeFlatPNG(w io.Writer, side int, rgb [3]uint16) error {
	chunk := func(typ string, data []byte) error {
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
		copy(hdr[4:], typ)
		crc := crc32.NewIEEE()
		crc.Write(hdr[4:])
		crc.Write(data)
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc.Sum32())
		for _, b := range [][]byte{hdr[:], data, sum[:]} {
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := w.Write([]byte("\x89PNG\r\n\x1a\n")); err != nil {
		return err
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(side))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(side))
	ihdr[8], ihdr[9] = 16, 2 // 16 bits a sample, RGB
	if err := chunk("IHDR", ihdr); err != nil {
		return err
	}
	var idat bytes.Buffer
	zw, err := zlib.NewWriterLevel(&idat, zlib.BestSpeed)
	if err != nil {
		return err
	}
	row := make([]byte, 1+side*6)
	for x := 0; x < side; x++ {
		for c := 0; c < 3; c++ {
			binary.BigEndian.PutUint16(row[1+x*6+c*2:], rgb[c])
		}
	}
	// The first row as it is (filter 0), the others as "up" (filter 2):
	// all zeros.
	up := make([]byte, len(row))
	up[0] = 2
	for y := 0; y < side; y++ {
		r := up
		if y == 0 {
			r = row
		}
		if _, err := zw.Write(r); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	const max = 1 << 20 // IDAT chunks of 1 MB
	for b := idat.Bytes(); len(b) > 0; {
		n := min(len(b), max)
		if err := chunk("IDAT", b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return chunk("IEND", nil)
}

// flatPNG returns the attack's image, made once and cached in the temp
// directory.
func flatPNG(side int) ([]byte, error) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("easelbench-png16-%d.png", side))
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, nil
	}
	var buf bytes.Buffer
	if err := writeFlatPNG(&buf, side, [3]uint16{0x1234, 0x8765, 0xabcd}); err != nil {
		return nil, err
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return buf.Bytes(), os.Rename(tmp, path)
}

// countingImages serves the same PNG under /big/<i>.png and counts each
// path's fetches.
type countingImages struct {
	png []byte
	mu  sync.Mutex
	n   map[string]int
}

func (c *countingImages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(c.png)))
	_, _ = w.Write(c.png)
}

func (e *env) memoryAttack(ctx context.Context, res *results) error {
	o := e.o
	if err := e.fresh(ctx); err != nil {
		return err
	}
	e.logf("  making the %d×%d 16-bit PNG (cached in %s)", o.memorySide, o.memorySide, os.TempDir())
	img, err := flatPNG(o.memorySide)
	if err != nil {
		return fmt.Errorf("the attack's PNG: %w", err)
	}
	srv := &countingImages{png: img, n: map[string]int{}}
	src, stopSrc, err := serveLoopback(srv)
	if err != nil {
		return err
	}
	defer stopSrc()
	gw, base, err := e.startGatewayEnv(ctx, "EASEL_FETCH_ALLOW_PRIVATE=true") // the sources are on loopback
	if err != nil {
		return err
	}
	defer gw.stop()
	wenv := []string{"EASEL_FETCH_ALLOW_PRIVATE=true"}
	mr := &memoryResult{Images: o.memoryImages, Side: o.memorySide, ImageBytes: len(img),
		DecodedMB: float64(o.memorySide) * float64(o.memorySide) * 8 / (1 << 20), WorkerEnv: append(append([]string(nil), wenv...), o.workerEnv...)}
	logPath := filepath.Join(logDir(), "worker-memory.log")
	var logFrom int64
	if fi, err := os.Stat(logPath); err == nil {
		logFrom = fi.Size()
	}
	waddr := freeAddr()
	wk, err := startProc("worker-memory", filepath.Join(o.binDir, "worker"), nil,
		append(e.serviceEnv(append([]string{"EASEL_WORKER_HTTP_ADDR=" + waddr}, wenv...)...), o.workerEnv...), io.Discard)
	if err != nil {
		return err
	}
	defer wk.kill()
	if err := wk.waitReady(ctx, "http://"+waddr+"/readyz"); err != nil {
		return fmt.Errorf("worker not ready (its log: %s): %w", logPath, err)
	}
	pid := wk.cmd.Process.Pid
	mr.BaseRSSMB, _ = memStatus(pid)
	mr.BaseRSSMB = zeroNaN(mr.BaseRSSMB)

	// Sample until stopped.
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, hwm := memStatus(pid)
			mr.Samples = append(mr.Samples, zeroNaN(rss))
			mr.PeakRSSMB = max(mr.PeakRSSMB, zeroNaN(rss), zeroNaN(hwm))
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	urls := make([]string, o.memoryImages)
	for i := range urls {
		urls[i] = fmt.Sprintf("%s/big/%d.png", src, i)
	}
	in, _ := json.Marshal(map[string]any{"model": "lumen-2.5-flash-image", "task_type": "image", "input": map[string]any{"prompt": "make it blue", "image_urls": urls}})
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	start := time.Now()
	id, err := createTask(ctx, client, base, e.keys[0], in)
	if err != nil {
		close(stopSampling)
		<-sampled
		return err
	}
	t, seen, werr := waitFinal(ctx, e.tasks(), e.acct, id, 50*time.Millisecond, 3*time.Minute)
	if werr == nil {
		mr.FinalAfterS = seen.Sub(start).Seconds()
		time.Sleep(5 * time.Second) // a retry would come now
	}
	close(stopSampling)
	<-sampled
	if t != nil {
		mr.Status = string(t.Status)
		if t.Failure != nil {
			mr.FailureCode, mr.FailureMsg = t.Failure.Code, t.Failure.Message
		}
	}
	if werr != nil {
		mr.Status += " (" + werr.Error() + ")"
	}
	if _, hwm := memStatus(pid); !math.IsNaN(hwm) {
		mr.PeakRSSMB = max(mr.PeakRSSMB, hwm)
	}
	exited, _ := wk.exited()
	mr.WorkerAlive = !exited
	srv.mu.Lock()
	for i := range urls {
		mr.Fetches = append(mr.Fetches, srv.n[fmt.Sprintf("/big/%d.png", i)])
	}
	srv.mu.Unlock()
	if mr.Retries, mr.Archived, err = asynqRetries(asynq.NewInspectorFromRedisClient(e.rdb)); err != nil {
		return err
	}
	if f, err := os.Open(logPath); err == nil {
		_, _ = f.Seek(logFrom, io.SeekStart)
		b, _ := io.ReadAll(f)
		f.Close()
		l := strings.ToLower(string(b))
		mr.OutOfMemory = strings.Contains(l, "out of memory") || strings.Contains(l, "fatal error")
	}
	res.Memory = mr
	e.logf("  task %s %s after %.2f s; worker peak RSS %.1f MB, alive %v; fetches %v; Asynq retry %d, archived %d",
		mr.Status, mr.FailureCode, mr.FinalAfterS, mr.PeakRSSMB, mr.WorkerAlive, mr.Fetches, mr.Retries, mr.Archived)
	return nil
}

// once reports whether the task ran once: no retry or archive, no image
// fetched twice.
func (r *memoryResult) once() bool {
	for _, n := range r.Fetches {
		if n > 1 {
			return false
		}
	}
	return r.Retries == 0 && r.Archived == 0
}

func (r *memoryResult) rows(w io.Writer) {
	if r == nil {
		fmt.Fprintf(w, "memory attack (--only memory)\t%s\t\t\t\t%s\t\n", notRun, notRun)
		return
	}
	fmt.Fprintf(w, "memory: worker peak RSS (%d PNGs of %d×%d, 16-bit)\t%.1f MB\t\t\t< %d MB, alive\t%s\t\n",
		r.Images, r.Side, r.Side, r.PeakRSSMB, memoryMaxRSSMB, yes(r.PeakRSSMB < memoryMaxRSSMB && r.WorkerAlive && !r.OutOfMemory))
	code := r.Status
	if r.FailureCode != "" {
		code += " " + r.FailureCode
	}
	fmt.Fprintf(w, "memory: the task's outcome\t%s\t\t\tfailed invalid_source_image, once\t%s\t\n",
		code, yes(r.Status == "failed" && r.FailureCode == "invalid_source_image" && r.once()))
}

func (r *memoryResult) details(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "memory: %d source images of %d bytes, %.0f MB each decoded; the task %s %s after %.2f s (%q); fetches per image %v, Asynq retry %d, archived %d; "+
		"worker RSS %.1f MB before, %.1f MB at peak, alive %v, out of memory in its log %v\n",
		r.Images, r.ImageBytes, r.DecodedMB, r.Status, r.FailureCode, r.FinalAfterS, r.FailureMsg, r.Fetches, r.Retries, r.Archived,
		r.BaseRSSMB, r.PeakRSSMB, r.WorkerAlive, r.OutOfMemory)
}
