package deploy

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/easelhq/easel/tools/testkit/localnet"
	testprograms "github.com/easelhq/easel/tools/testkit/programs"
)

// programs are the gateway and worker binaries, built once per test run
// as the Dockerfiles build them (CGO_ENABLED=0), or `make test`'s.
var programs = testprograms.New()

func TestMain(m *testing.M) {
	code := m.Run()
	programs.Remove()
	os.Exit(code)
}

func builtBinaries(t *testing.T) string {
	t.Helper()
	return programs.Dir(t, "gateway", "worker")
}

// TestProbesAnswer runs each Easel container of the dev overlay as its
// Deployment configures it (its environment, with Redis replaced by an
// embedded one, results by a directory and listen addresses by free
// loopback ports standing for the container ports) and asks its probes
// and its scrape endpoint what the kubelet and Prometheus would: each must
// answer 200. Then SIGTERM, as at a pod's end: the process must exit 0
// within the pod's grace period.
func TestProbesAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	objs := decode(t, buildKrusty(t, devDir))
	pods := easelPods(t, objs)
	if t.Failed() {
		t.FailNow()
	}
	bins := builtBinaries(t)
	redis := miniredis.RunT(t)
	for _, p := range pods {
		t.Run(p.dep.Name, func(t *testing.T) {
			env := maps.Clone(p.env)
			env["EASEL_REDIS_URL"] = "redis://" + redis.Addr() + "/0"
			env["EASEL_BLOB_URL"] = "file://" + t.TempDir()
			for k := range env {
				if strings.HasPrefix(k, "EASEL_S3_") {
					delete(env, k)
				}
			}
			// Container port -> the loopback port standing for it.
			ports := map[int32]int{}
			for _, l := range p.listeners {
				addr := localnet.FreeAddr(t)
				_, port, _ := net.SplitHostPort(addr)
				ports[l.port], _ = strconv.Atoi(port)
				env[l.envVar] = addr
			}
			cmd := exec.Command(filepath.Join(bins, p.bin.name))
			cmd.Env = []string{"HOME=" + t.TempDir()}
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var logs syncBuffer
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			defer func() {
				if !stopped {
					_ = cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("%s output:\n%s", p.bin.name, logs.String())
				}
			}()

			get := func(what string, port int32, path string) {
				t.Helper()
				lp, ok := ports[port]
				if !ok {
					t.Errorf("%s: port %d is no listener of the %s", what, port, p.bin.name)
					return
				}
				u := "http://127.0.0.1:" + strconv.Itoa(lp) + path
				deadline := time.Now().Add(20 * time.Second)
				for {
					status, err := httpGet(u)
					if status == http.StatusOK {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("%s: GET %s (container port %d): %d %v", what, path, port, status, err)
						return
					}
					select {
					case err := <-exited:
						stopped = true
						t.Fatalf("the %s exited: %v", p.bin.name, err)
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
			for _, pr := range []struct {
				kind  string
				probe *corev1.Probe
			}{{"livenessProbe", p.c.LivenessProbe}, {"readinessProbe", p.c.ReadinessProbe}} {
				cp, ok := containerPort(p.c, pr.probe.HTTPGet.Port)
				if !ok {
					t.Fatalf("%s: undeclared port %s", pr.kind, pr.probe.HTTPGet.Port.String())
				}
				get(pr.kind, cp.ContainerPort, pr.probe.HTTPGet.Path)
			}
			ann := p.dep.Spec.Template.Annotations
			port, _ := strconv.Atoi(ann["prometheus.io/port"])
			get("prometheus.io/port", int32(port), ann["prometheus.io/path"])
			if lp, ok := ports[int32(port)]; ok {
				checkExposition(t, p.bin.name, "http://127.0.0.1:"+strconv.Itoa(lp)+ann["prometheus.io/path"])
			}

			grace := 30 * time.Second
			if g := p.dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				stopped = true
				if err != nil {
					t.Errorf("after SIGTERM the %s exited with %v", p.bin.name, err)
				}
			case <-time.After(grace):
				t.Errorf("the %s did not exit within the grace period (%s) of SIGTERM", p.bin.name, grace)
			}
		})
	}
}

// checkExposition: every Easel or Asynq metric family a binary exports is
// one the dashboard's contract knows, with the same type (a renamed metric
// would leave a dashboard panel empty).
func checkExposition(t *testing.T, bin, u string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	families, ours := 0, 0
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		families++
		name, kind := f[2], f[3]
		if !strings.HasPrefix(name, "easel_") && !strings.HasPrefix(name, "asynq_") {
			continue
		}
		ours++
		if want, ok := contractMetrics[name]; !ok {
			t.Errorf("the %s exports %s (%s), which contractMetrics (dashboard_test.go) does not list", bin, name, kind)
		} else if want != kind {
			t.Errorf("the %s exports %s as a %s; contractMetrics says %s", bin, name, kind, want)
		}
	}
	if families == 0 {
		t.Errorf("the %s's %s has no metric families", bin, u)
	}
	t.Logf("the %s exports %d metric families, %d of them Easel's or Asynq's", bin, families, ours)
}

func httpGet(u string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// syncBuffer collects a process's output from two pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
