package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/easelhq/easel/pkg/account"
	easel "github.com/easelhq/easel/sdk/go"
)

// buildEasel returns the easel command's binary.
func buildEasel() (string, error) {
	dir, err := binaries.Build("easel")
	return filepath.Join(dir, "easel"), err
}

// cli runs the easel binary against a stack.
type cli struct {
	t   *testing.T
	bin string
	env []string
}

func newCLI(t *testing.T, s *stack) *cli {
	t.Helper()
	bin, err := buildEasel()
	if err != nil {
		t.Fatal(err)
	}
	return &cli{t: t, bin: bin, env: append(cleanEnv(), "EASEL_URL="+s.base, "EASEL_API_KEY="+s.key)}
}

// run runs the command with pipes for stdout and stderr and returns them
// and its exit code.
func (c *cli) run(args ...string) (string, string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Dir = c.t.TempDir()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		c.t.Fatalf("easel %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// runTTY runs the command in a pseudo-terminal and returns what it drew.
func (c *cli) runTTY(args ...string) (string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(c.env, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
	if err != nil {
		c.t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, ptmx) // ends with EIO once the command exits
		close(copied)
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		c.t.Fatal("the terminal's output did not end")
	}
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		c.t.Fatalf("easel %v: %v", args, err)
	}
	return out.String(), code
}

func decodeImage(t *testing.T, path string) (image.Config, string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg, format
}

// TestCLI runs the easel command against the real gateway and a worker
// that runs one task at a time.
func TestCLI(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{simDelay: time.Second, env: map[string]string{"EASEL_WORKER_CONCURRENCY": "1"}})
	c := newCLI(t, s)
	sdk, err := easel.New(s.base, s.key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	t.Run("generate to a file", func(t *testing.T) {
		out := filepath.Join(dir, "lighthouse.png")
		stdout, stderr, code := c.run("generate", "a lighthouse at dusk", "--model", "pro", "--size", "2K", "--ratio", "16:9", "-o", out)
		if code != 0 || stdout != "wrote "+out+"\n" || stderr != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if cfg, format := decodeImage(t, out); format != "png" || cfg.Width != 2752 || cfg.Height != 1536 {
			t.Errorf("%s: %s %dx%d; want png 2752x1536", out, format, cfg.Width, cfg.Height)
		}
	})

	t.Run("generate an edit of a URL", func(t *testing.T) {
		src := sourceServer(t)
		out := filepath.Join(dir, "winter.png")
		stdout, stderr, code := c.run("generate", "make it winter", "--image", src.URL+"/640x360.png", "-o", out)
		if code != 0 || stdout != "wrote "+out+"\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// The source's ratio, 16:9, on the standard model.
		if cfg, _ := decodeImage(t, out); cfg.Width != 1344 || cfg.Height != 768 {
			t.Errorf("%dx%d; want 1344x768", cfg.Width, cfg.Height)
		}
	})

	t.Run("generate an edit of a local file", func(t *testing.T) {
		local := filepath.Join(dir, "local-640x360.png")
		if err := os.WriteFile(local, pngBytes(t, 640, 360), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "local-winter.png")
		stdout, stderr, code := c.run("generate", "make it winter", "--image", local, "-o", out)
		if code != 0 || stdout != "wrote "+out+"\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// Uploaded, then read by the worker: the file's ratio, 16:9.
		if cfg, _ := decodeImage(t, out); cfg.Width != 1344 || cfg.Height != 768 {
			t.Errorf("%dx%d; want 1344x768", cfg.Width, cfg.Height)
		}
	})

	t.Run("generate in a terminal", func(t *testing.T) {
		occupy(t, sdk) // so the task waits in the queue first
		out := filepath.Join(dir, "tty.png")
		drawn, code := c.runTTY("generate", "a lighthouse at dusk", "--ratio", "16:9", "-o", out)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, drawn)
		}
		// The spinner with the queue position, the bar rising to 100 %,
		// then where the image went.
		pending, full, wrote := strings.Index(drawn, "pending: #1 in queue"), strings.Index(drawn, "100%"), strings.Index(drawn, "wrote "+out)
		if pending < 0 || full < pending || wrote < full {
			t.Errorf("drawn (spinner at %d, 100%% at %d, wrote at %d):\n%q", pending, full, wrote, drawn)
		}
		if !strings.Contains(drawn, "processing") || !strings.Contains(drawn, "completed  100%") {
			t.Errorf("no processing bar completed at 100%%:\n%q", drawn)
		}
		if cfg, format := decodeImage(t, out); format != "png" || cfg.Width != 1344 || cfg.Height != 768 {
			t.Errorf("%s: %s %dx%d; want png 1344x768", out, format, cfg.Width, cfg.Height)
		}
	})

	var completed string
	t.Run("generate --json", func(t *testing.T) {
		out := filepath.Join(dir, "j.png")
		stdout, stderr, code := c.run("generate", "a cat", "--json", "-o", out)
		var got struct {
			Task  easel.Task `json:"task"`
			Files []string   `json:"files"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Task.Status != easel.StatusCompleted || len(got.Files) != 1 || got.Files[0] != out {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		completed = got.Task.ID
		if cfg, _ := decodeImage(t, out); cfg.Width != 1024 || cfg.Height != 1024 {
			t.Errorf("%dx%d; want 1024x1024", cfg.Width, cfg.Height)
		}
	})

	t.Run("task commands", func(t *testing.T) {
		stdout, _, code := c.run("task", "get", completed, "--json")
		var rec easel.Task
		if code != 0 || json.Unmarshal([]byte(stdout), &rec) != nil || rec.ID != completed || rec.Status != easel.StatusCompleted || len(rec.Results) != 1 {
			t.Errorf("task get --json: exit %d %q", code, stdout)
		}
		if stdout, _, code := c.run("task", "get", completed); code != 0 || !strings.HasPrefix(stdout, completed+"  completed 100%\n") {
			t.Errorf("task get: exit %d %q", code, stdout)
		}
		var page easel.TaskPage
		if stdout, _, code := c.run("task", "list", "--limit", "1", "--json"); code != 0 || json.Unmarshal([]byte(stdout), &page) != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != completed || page.NextCursor == "" {
			t.Errorf("task list: exit %d %q", code, stdout)
		}
		if stdout, _, code := c.run("task", "list", "--status", "completed"); code != 0 || !strings.Contains(stdout, completed+"  completed  100%") || strings.Contains(stdout, "processing") {
			t.Errorf("task list --status completed: exit %d %q", code, stdout)
		}
		out := filepath.Join(dir, "again.png")
		if stdout, _, code := c.run("task", "wait", completed, "-o", out); code != 0 || stdout != "wrote "+out+"\n" {
			t.Errorf("task wait -o: exit %d %q", code, stdout)
		}
		decodeImage(t, out)

		occupy(t, sdk)
		id, err := sdk.Create(context.Background(), easel.CreateRequest{Model: easel.ModelPro, Prompt: "never drawn"})
		if err != nil {
			t.Fatal(err)
		}
		if stdout, _, code := c.run("task", "cancel", id); code != 0 || !strings.HasPrefix(stdout, "canceled "+id+" (refunded ") {
			t.Errorf("task cancel: exit %d %q", code, stdout)
		}
		if _, stderr, code := c.run("task", "cancel", id); code != 1 || !strings.Contains(stderr, "easel: 409 Conflict: task "+id+" is already canceled") {
			t.Errorf("second cancel: exit %d %q", code, stderr)
		}
		if stdout, stderr, code := c.run("task", "wait", id); code != 1 || !strings.HasPrefix(stdout, id+"  canceled") || stderr != "easel: task "+id+" was canceled\n" {
			t.Errorf("task wait of a canceled task: exit %d %q %q", code, stdout, stderr)
		}
	})

	t.Run("webhook and usage", func(t *testing.T) {
		sink := newHookSink(t, nil)
		hook := sink.srv.URL + "/cli"
		endpoint := "endpoint  " + hook + "\nevents    task.completed, task.failed\n"
		if stdout, stderr, code := c.run("webhook", "set", hook, "--events", "task.completed,task.failed"); code != 0 || stdout != endpoint {
			t.Fatalf("webhook set: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		stdout, stderr, code := c.run("webhook", "test")
		m := regexp.MustCompile(`^(msg_test_[0-9a-f]{16})  delivered  HTTP 200  \d+ms\n$`).FindStringSubmatch(stdout)
		if code != 0 || m == nil {
			t.Fatalf("webhook test: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		got := sink.waitCalls(t, "/cli", 1, ofType("webhook.test"))
		if len(got) != 1 || got[0].header.Get("webhook-id") != m[1] || got[0].header.Get("webhook-signature") == "" {
			t.Errorf("the receiver got %d test events, the first with webhook-id %q; want one, %s, signed", len(got), got[0].header.Get("webhook-id"), m[1])
		}
		if stdout, _, code := c.run("webhook", "get"); code != 0 || stdout != endpoint {
			t.Errorf("webhook get: exit %d %q; want %q", code, stdout, endpoint)
		}
		var e easel.WebhookEndpoint
		if stdout, _, code := c.run("webhook", "get", "--json"); code != 0 || json.Unmarshal([]byte(stdout), &e) != nil || e.URL != hook || strings.Join(e.Events, ",") != "task.completed,task.failed" {
			t.Errorf("webhook get --json: exit %d %q", code, stdout)
		}
		if stdout, _, code := c.run("webhook", "delete"); code != 0 || stdout != "deleted the webhook endpoint\n" {
			t.Errorf("webhook delete: exit %d %q", code, stdout)
		}
		if stdout, _, code := c.run("webhook", "get"); code != 0 || !strings.HasPrefix(stdout, "no webhook endpoint") {
			t.Errorf("webhook get after the delete: exit %d %q", code, stdout)
		}
		if stdout, stderr, code := c.run("webhook", "test"); code != 1 || stdout != "" || !strings.HasPrefix(stderr, "easel: 409 Conflict: the account has no webhook endpoint") {
			t.Errorf("webhook test after the delete: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if n := len(sink.calls("/cli")); n != len(got) {
			t.Errorf("the receiver got %d events; want %d", n, len(got))
		}

		// The tasks generated above were made with the stack's key: today's
		// row of the standard model under its visible prefix.
		prefix := account.VisibleOf(s.key)
		today := time.Now().UTC().Format(time.DateOnly)
		for _, args := range [][]string{{"usage", "--csv"}, {"usage", "--csv", "--days", "1", "--key", prefix}} {
			stdout, stderr, code := c.run(args...)
			rows, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
			if code != 0 || err != nil || len(rows) < 2 || strings.Join(rows[0], ",") != "date,model,key,tasks,credits,refunds,refunded_credits" {
				t.Fatalf("easel %v: exit %d, stdout %q, stderr %q, %v", args, code, stdout, stderr, err)
			}
			found := false
			for _, r := range rows[1:] {
				if r[0] == today && r[1] == easel.ModelStandard && r[2] == prefix {
					tasks, _ := strconv.Atoi(r[3])
					credits, _ := strconv.Atoi(r[4])
					found = found || tasks >= 1 && credits > 0
				}
				if len(args) > 2 && (r[0] != today || r[2] != prefix) {
					t.Errorf("easel %v: row %v is not today's of %s", args, r, prefix)
				}
			}
			if !found {
				t.Errorf("easel %v: no row of %s for %s %s with tasks and credits:\n%s", args, easel.ModelStandard, today, prefix, stdout)
			}
		}
		if stdout, _, code := c.run("usage", "--days", "1"); code != 0 || !regexp.MustCompile(`(?m)^`+today+`  `+easel.ModelStandard+` +[1-9]`).MatchString(stdout) || !regexp.MustCompile(`(?m)^`+prefix+` +[1-9]`).MatchString(stdout) {
			t.Errorf("usage: exit %d\n%s", code, stdout)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		local := filepath.Join(dir, "photo.png")
		if err := os.WriteFile(local, []byte("\x89PNG"), 0o644); err != nil {
			t.Fatal(err)
		}
		before, err := sdk.List(context.Background(), easel.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		noKey := &cli{t: t, bin: c.bin, env: append(cleanEnv(), "EASEL_URL="+s.base)}
		tests := []struct {
			name   string
			c      *cli
			args   []string
			stderr string
		}{
			{"a local file that is not an image", c, []string{"generate", "x", "--image", local}, "--image " + local + ": upload: 415 Unsupported Media Type: the file is not a PNG, JPEG, WebP or GIF image"},
			{"no key", noKey, []string{"generate", "x"}, "no API key: pass --api-key or set EASEL_API_KEY"},
			{"a wrong key", c, []string{"task", "list", "--api-key", "esk_unknownunknownunknownunknownunknown00"}, "easel: 401 Unauthorized"},
			{"a size on the standard model", c, []string{"generate", "x", "--size", "2K"}, "input.image_size is not supported by model lumen-2.5-flash-image"},
			{"an unknown task", c, []string{"task", "get", "task_lumen_123"}, "easel: 404 Not Found: task task_lumen_123 not found"},
		}
		for _, tt := range tests {
			stdout, stderr, code := tt.c.run(tt.args...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and %q", tt.name, code, stdout, stderr, tt.stderr)
			}
		}
		after, err := sdk.List(context.Background(), easel.ListOptions{Limit: 100})
		if err != nil || len(after.Tasks) != len(before.Tasks) {
			t.Errorf("tasks %d then %d: a refused command created one", len(before.Tasks), len(after.Tasks))
		}
	})
}
