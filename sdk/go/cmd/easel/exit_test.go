package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs the command itself when the test binary is started by
// runMain: main, with its real stderr and exit code.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("EASEL_TEST_RUN_MAIN"); ok {
		var list []string
		if err := json.Unmarshal([]byte(args), &list); err != nil {
			panic(err)
		}
		os.Args = append([]string{"easel"}, list...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs `easel args...` (main, in a child process) with env, and
// returns its stdout, stderr and exit code.
func runMain(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	list, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(append(os.Environ(), env...), "EASEL_TEST_RUN_MAIN="+string(list))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// An error is printed once, on one line, with one "easel: " in front,
// though the SDK's errors start with "easel: " already.
func TestErrorIsPrintedOnce(t *testing.T) {
	// The handler names the server's own URL, set before it serves: its
	// requests come from another process, which orders nothing here.
	var srvURL string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, msg string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "msg": msg, "data": nil})
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/files/"):
			fail(http.StatusGone, "this download URL has expired")
		case r.Header.Get("Authorization") == "Bearer esk_proxied":
			// A proxy's page, not the API's envelope.
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("<html>\n<body>\r\n  Blocked by the proxy\n</body>\n</html>\n"))
		case r.Header.Get("Authorization") != "Bearer esk_test":
			fail(http.StatusUnauthorized, "invalid API key")
		case r.URL.Path == "/v1/task/query":
			_ = json.NewEncoder(w).Encode(map[string]any{"task_id": "task_lumen_1", "task_type": "image", "model": "lumen-2.5-flash-image",
				"status": "completed", "progress": 100, "create_time": 1795359098636, "complete_time": 1795359100975,
				"results": []string{srvURL + "/v1/files/2026112214/1.png?expires=1&sig=x"}})
		default:
			fail(http.StatusNotFound, "not found")
		}
	}))
	srvURL = "http://" + srv.Listener.Addr().String()
	srv.Start()
	defer srv.Close()
	env := []string{"EASEL_URL=" + srv.URL, "EASEL_API_KEY=esk_wrong"}
	good := []string{"EASEL_URL=" + srv.URL, "EASEL_API_KEY=esk_test"}
	proxied := []string{"EASEL_URL=" + srv.URL, "EASEL_API_KEY=esk_proxied"}
	out := filepath.Join(t.TempDir(), "out.png")

	tests := []struct {
		name   string
		env    []string
		args   []string
		stderr string
	}{
		{"an API error", env, []string{"task", "list"}, "easel: 401 Unauthorized: invalid API key\n"},
		{"an API error in generate", env, []string{"generate", "a lighthouse"}, "easel: 401 Unauthorized: invalid API key\n"},
		{"an SDK error", []string{"EASEL_URL=ftp://example.com", "EASEL_API_KEY=esk_wrong"}, []string{"task", "list"}, `easel: the API URL "ftp://example.com" is not an absolute http or https URL` + "\n"},
		{"an SDK error the command wrapped", good, []string{"task", "wait", "task_lumen_1", "-o", out}, "easel: downloading the image of task task_lumen_1: 410 Gone: this download URL has expired\n"},
		{"a proxy's page of several lines", proxied, []string{"task", "get", "task_lumen_1"}, "easel: 403 Forbidden: <html> <body> Blocked by the proxy </body> </html>\n"},
		{"the command's own error", []string{"EASEL_URL=" + srv.URL, "EASEL_API_KEY="}, []string{"task", "list"}, "easel: no API key: pass --api-key or set EASEL_API_KEY (`make run` prints one)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runMain(t, tt.env, tt.args...)
			if code != 1 || stdout != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if stderr != tt.stderr {
				t.Errorf("stderr %q; want %q", stderr, tt.stderr)
			}
			if strings.Count(stderr, "\n") != 1 || strings.Count(stderr, "easel: ") != 1 {
				t.Errorf("stderr %q; want one line with one \"easel: \"", stderr)
			}
		})
	}
}
