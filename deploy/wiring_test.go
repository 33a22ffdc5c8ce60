package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/pkg/jobs"
	"github.com/easelhq/easel/pkg/service"
	"github.com/easelhq/easel/worker"
)

// The peak RSS make bench reports (BENCHMARKS.md: the gateway's after the
// create and query runs, the worker's after a drain), rounded up: a pod's
// memory request is at least this.
const (
	measuredGatewayRSS = 64 << 20
	measuredWorkerRSS  = 91 << 20
)

// runtimeVars are variables the Go runtime, the AWS SDK (the standard
// credential chain behind EASEL_S3_*) or the OpenTelemetry SDK (tracing)
// reads rather than Easel's configuration; a manifest may set them.
func runtimeVar(name string) bool {
	switch name {
	case "GOMEMLIMIT", "GOMAXPROCS", "GOGC", "GODEBUG":
		return true
	}
	return strings.HasPrefix(name, "AWS_") || strings.HasPrefix(name, "OTEL_")
}

// binary is one of Easel's programs as a manifest runs it.
type binary struct {
	name       string // gateway, worker
	image      string // the image repository the manifests run
	dockerfile string
	reads      []string // every variable its configuration reads
}

var (
	gatewayBin = binary{"gateway", "easel-gateway", "gateway.Dockerfile", config.Names(&gateway.Config{})}
	workerBin  = binary{"worker", "easel-worker", "worker.Dockerfile", config.Names(&worker.Config{})}
)

// listener is an address a binary listens on, and what it serves there.
type listener struct {
	envVar          string
	port            int32
	health, metrics bool
}

// easelPod is an Easel container in a Deployment, with its environment
// resolved from the built objects.
type easelPod struct {
	dep        *appsv1.Deployment
	c          corev1.Container
	bin        binary
	env        map[string]string
	fromSecret map[string]bool
	listeners  []listener
	gw         *gateway.Config
	wk         *worker.Config
}

// envValue returns the parsed value of the configuration field that reads
// name (its default when unset), looking into embedded structs.
func envValue(cfg any, name string) (reflect.Value, bool) {
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if fv, ok := envValue(v.Field(i).Addr().Interface(), name); ok {
				return fv, true
			}
			continue
		}
		if k, _, _ := strings.Cut(f.Tag.Get("env"), ","); k == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func addrPort(t *testing.T, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	return int32(n)
}

// resolveEnv is a container's environment as the kubelet would give it:
// envFrom first, then env, values from the ConfigMaps and Secrets in the
// same build. fromSecret records the variables a Secret supplies.
func resolveEnv(t *testing.T, objs *objects, c corev1.Container) (env map[string]string, fromSecret map[string]bool) {
	t.Helper()
	env, fromSecret = map[string]string{}, map[string]bool{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm := objs.configMap(ef.ConfigMapRef.Name)
			if cm == nil {
				t.Errorf("container %s: envFrom ConfigMap %s is not in the build", c.Name, ef.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		case ef.SecretRef != nil:
			s := objs.secret(ef.SecretRef.Name)
			if s == nil {
				t.Errorf("container %s: envFrom Secret %s is not in the build", c.Name, ef.SecretRef.Name)
				continue
			}
			for k := range s.Data {
				env[ef.Prefix+k], _ = secretValue(s, k)
				fromSecret[ef.Prefix+k] = true
			}
			for k := range s.StringData {
				env[ef.Prefix+k], _ = secretValue(s, k)
				fromSecret[ef.Prefix+k] = true
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := objs.secret(ref.Name)
			if s == nil {
				t.Errorf("container %s: %s from Secret %s, which is not in the build", c.Name, e.Name, ref.Name)
				continue
			}
			v, ok := secretValue(s, ref.Key)
			if !ok {
				t.Errorf("container %s: %s from key %s of Secret %s, which has no such key", c.Name, e.Name, ref.Key, ref.Name)
			}
			env[e.Name], fromSecret[e.Name] = v, true
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := objs.configMap(ref.Name)
			if cm == nil {
				t.Errorf("container %s: %s from ConfigMap %s, which is not in the build", c.Name, e.Name, ref.Name)
				continue
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Errorf("container %s: %s from key %s of ConfigMap %s, which has no such key", c.Name, e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		default: // fieldRef, resourceFieldRef: known only in the cluster
			env[e.Name] = "(" + e.Name + ")"
		}
	}
	return env, fromSecret
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand does the kubelet's $(VAR) expansion of earlier variables.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func imageRepo(image string) string {
	repo := image
	if i := strings.LastIndex(repo, "/"); i >= 0 {
		repo = repo[i+1:]
	}
	repo, _, _ = strings.Cut(repo, "@")
	repo, _, _ = strings.Cut(repo, ":")
	return repo
}

// easelPods finds the Easel containers of the build, by image, and checks
// each one's configuration as its binary would load it.
func easelPods(t *testing.T, objs *objects) []*easelPod {
	t.Helper()
	var out []*easelPod
	for _, d := range objs.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			var bin binary
			switch imageRepo(c.Image) {
			case gatewayBin.image:
				bin = gatewayBin
			case workerBin.image:
				bin = workerBin
			default:
				continue
			}
			p := &easelPod{dep: d, c: c, bin: bin}
			p.env, p.fromSecret = resolveEnv(t, objs, c)
			// Every variable set is one the binary reads.
			for k := range p.env {
				if !slices.Contains(bin.reads, k) && !runtimeVar(k) {
					t.Errorf("deployment %s sets %s, which the %s does not read", d.Name, k, bin.name)
				}
			}
			// The binary accepts the configuration (required variables set,
			// values valid), and listens where the manifest says.
			switch bin.name {
			case "gateway":
				cfg, err := gateway.LoadConfig(p.env)
				if err != nil {
					t.Errorf("deployment %s: the gateway would refuse its configuration: %v", d.Name, err)
					continue
				}
				p.gw = &cfg
				p.listeners = append(p.listeners, listener{envVar: "EASEL_HTTP_ADDR", port: addrPort(t, "EASEL_HTTP_ADDR", cfg.HTTPAddr), health: true})
				if v, ok := envValue(&cfg, "EASEL_METRICS_ADDR"); !ok {
					t.Errorf("the gateway's configuration has no EASEL_METRICS_ADDR")
				} else if v.String() != "" {
					p.listeners = append(p.listeners, listener{envVar: "EASEL_METRICS_ADDR", port: addrPort(t, "EASEL_METRICS_ADDR", v.String()), health: true, metrics: true})
				}
				if v, ok := envValue(&cfg, "EASEL_METRICS_ON_API"); ok && v.Kind() == reflect.Bool && v.Bool() {
					p.listeners[0].metrics = true
				}
			case "worker":
				cfg, err := worker.LoadConfig(p.env)
				if err != nil {
					t.Errorf("deployment %s: the worker would refuse its configuration: %v", d.Name, err)
					continue
				}
				p.wk = &cfg
				p.listeners = append(p.listeners, listener{envVar: "EASEL_WORKER_HTTP_ADDR", port: addrPort(t, "EASEL_WORKER_HTTP_ADDR", cfg.HTTPAddr), health: true, metrics: true})
			}
			// Secrets come from a Secret, never from a literal.
			for _, k := range []string{"EASEL_SIGNING_SECRET", "EASEL_REDIS_URL", "EASEL_S3_ACCESS_KEY_ID", "EASEL_S3_SECRET_ACCESS_KEY", "EASEL_ADMIN_TOKEN", "EASEL_GEMINI_API_KEY"} {
				if _, set := p.env[k]; set && !p.fromSecret[k] {
					t.Errorf("deployment %s: %s is a literal; take it from a Secret", d.Name, k)
				}
			}
			// The workers sign the result URLs of webhook bodies with the
			// gateways' key.
			required := []string{"EASEL_REDIS_URL", "EASEL_SIGNING_SECRET"}
			for _, k := range required {
				if !p.fromSecret[k] {
					t.Errorf("deployment %s: %s must be set, from a Secret", d.Name, k)
				}
			}
			out = append(out, p)
		}
	}
	return out
}

func TestWiring(t *testing.T) {
	for _, r := range renderers(t) {
		t.Run(r.name, func(t *testing.T) {
			objs := decode(t, r.build(t, devDir))
			pods := easelPods(t, objs)
			checkServicesAndQueues(t, objs, pods)
			for _, p := range pods {
				checkPorts(t, p)
				checkDockerfile(t, p)
				checkGrace(t, p)
				checkResources(t, p)
				checkMemoryLimit(t, p)
			}
			checkPodSecurity(t, objs)
			checkSelectors(t, objs)
			checkAutoscalers(t, objs, pods)
			checkKEDA(t, objs, pods)
			checkStorage(t, objs, pods)
			checkRedis(t, objs, pods)
			checkResultURLs(t, pods)
			checkTracing(t, pods)
		})
	}
}

// checkTracing: every Easel pod takes the OTLP endpoint from the
// configuration (one key for all), empty by default: tracing is off until
// an operator sets it.
func checkTracing(t *testing.T, pods []*easelPod) {
	for _, p := range pods {
		v, ok := p.env["OTEL_EXPORTER_OTLP_ENDPOINT"]
		if !ok {
			t.Errorf("deployment %s has no OTEL_EXPORTER_OTLP_ENDPOINT: tracing cannot be turned on from the configuration", p.dep.Name)
		} else if v != "" {
			t.Errorf("deployment %s sends spans to %q by default; want tracing off (empty)", p.dep.Name, v)
		}
	}
}

// checkResultURLs: the workers make the result URLs of webhook bodies as
// the gateway does, with its key and its public address.
func checkResultURLs(t *testing.T, pods []*easelPod) {
	var gw *easelPod
	for _, p := range pods {
		if p.gw != nil {
			gw = p
		}
	}
	if gw == nil {
		return
	}
	for _, p := range pods {
		if p.wk == nil {
			continue
		}
		if p.env["EASEL_SIGNING_SECRET"] != gw.env["EASEL_SIGNING_SECRET"] {
			t.Errorf("deployment %s signs result URLs with another key than %s", p.dep.Name, gw.dep.Name)
		}
		if p.wk.PublicURL != gw.gw.PublicURL {
			t.Errorf("deployment %s makes result URLs under %s; the gateway serves them at %s", p.dep.Name, p.wk.PublicURL, gw.gw.PublicURL)
		}
	}
}

// TestBaseWiring checks the base alone: it references a Secret it does not
// define (an overlay or the operator provides it), by the name and keys the
// dev overlay's example generator makes.
func TestBaseWiring(t *testing.T) {
	objs := decode(t, buildKrusty(t, baseDir))
	if len(objs.secrets) != 0 {
		t.Errorf("the base defines Secrets %v: secrets come from overlays or the operator", objs.secrets)
	}
	dev := decode(t, buildKrusty(t, devDir))
	if len(dev.secrets) != 1 {
		t.Fatalf("the dev overlay makes %d Secrets; want 1", len(dev.secrets))
	}
	devSecret := dev.secrets[0]
	for _, d := range objs.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if ref.Name != "easel-secrets" {
					t.Errorf("deployment %s: %s from Secret %s; the base reads easel-secrets", d.Name, e.Name, ref.Name)
				}
				if _, ok := secretValue(devSecret, ref.Key); !ok {
					t.Errorf("deployment %s: %s from key %s, which the dev overlay's example Secret lacks", d.Name, e.Name, ref.Key)
				}
			}
		}
	}
	for _, ta := range objs.triggerAuths {
		for _, ref := range ta.Spec.SecretTargetRef {
			if _, ok := secretValue(devSecret, ref.Key); ref.Name != "easel-secrets" || !ok {
				t.Errorf("TriggerAuthentication %s: Secret %s key %s", ta.Name, ref.Name, ref.Key)
			}
		}
	}
}

// checkServicesAndQueues: one gateway Deployment, and one worker Deployment
// for each model queue, each serving that queue only.
func checkServicesAndQueues(t *testing.T, objs *objects, pods []*easelPod) {
	gateways := 0
	queues := map[string]string{}
	for _, p := range pods {
		switch {
		case p.gw != nil:
			gateways++
		case p.wk != nil:
			q := workerQueue(t, p)
			if q == "" {
				continue
			}
			if other, dup := queues[q]; dup {
				t.Errorf("queue %s is served by both %s and %s", q, other, p.dep.Name)
			}
			queues[q] = p.dep.Name
		}
	}
	if gateways != 1 {
		t.Errorf("%d gateway Deployments; want 1", gateways)
	}
	for _, q := range jobs.Queues() {
		if queues[q] == "" {
			t.Errorf("no worker Deployment serves queue %s", q)
		}
	}
}

// workerQueue returns the one queue a worker serves (EASEL_QUEUES).
func workerQueue(t *testing.T, p *easelPod) string {
	t.Helper()
	qs, err := worker.ParseQueues(p.wk.Queues)
	if err != nil {
		t.Errorf("deployment %s: %v", p.dep.Name, err)
		return ""
	}
	if len(qs) != 1 {
		t.Errorf("deployment %s serves queues %q: one Deployment per queue, so each scales on its own queue", p.dep.Name, p.wk.Queues)
		return ""
	}
	for tier := range qs {
		return jobs.Queue(tier)
	}
	return ""
}

func containerPort(c corev1.Container, port intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if port.Type == intstr.String && cp.Name == port.StrVal || port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// checkPorts: the container declares exactly the ports its binary listens
// on, probes hit /healthz and /readyz on a port that serves them, and the
// scrape annotations name the port serving /metrics.
func checkPorts(t *testing.T, p *easelPod) {
	name := "deployment " + p.dep.Name
	byPort := map[int32]listener{}
	for _, l := range p.listeners {
		byPort[l.port] = l
	}
	for _, cp := range p.c.Ports {
		l, ok := byPort[cp.ContainerPort]
		if !ok {
			t.Errorf("%s declares port %d (%s), where the %s does not listen", name, cp.ContainerPort, cp.Name, p.bin.name)
			continue
		}
		if cp.Name == "metrics" && !l.metrics {
			t.Errorf("%s: port %d is named metrics but %s serves no /metrics", name, cp.ContainerPort, l.envVar)
		}
		if cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: port %d is %s", name, cp.ContainerPort, cp.Protocol)
		}
	}
	for _, l := range p.listeners {
		if _, ok := containerPort(p.c, intstr.FromInt32(l.port)); !ok {
			t.Errorf("%s: the %s listens on %d (%s) but the container does not declare it", name, p.bin.name, l.port, l.envVar)
		}
	}
	for _, pr := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"liveness", "/healthz", p.c.LivenessProbe}, {"readiness", "/readyz", p.c.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", name, pr.kind)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			t.Errorf("%s: %s probe on %s; want %s", name, pr.kind, pr.probe.HTTPGet.Path, pr.path)
		}
		cp, ok := containerPort(p.c, pr.probe.HTTPGet.Port)
		if !ok {
			t.Errorf("%s: %s probe on port %s, which the container does not declare", name, pr.kind, pr.probe.HTTPGet.Port.String())
			continue
		}
		if l, ok := byPort[cp.ContainerPort]; !ok || !l.health {
			t.Errorf("%s: %s probe on port %d, which serves no %s", name, pr.kind, cp.ContainerPort, pr.path)
		}
		if s := pr.probe.HTTPGet.Scheme; s != "" && s != corev1.URISchemeHTTP {
			t.Errorf("%s: %s probe over %s", name, pr.kind, s)
		}
	}
	ann := p.dep.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" {
		t.Errorf("%s: pods not annotated prometheus.io/scrape: \"true\"", name)
	}
	if ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: prometheus.io/path %q", name, ann["prometheus.io/path"])
	}
	port, err := strconv.Atoi(ann["prometheus.io/port"])
	if l, ok := byPort[int32(port)]; err != nil || !ok || !l.metrics {
		t.Errorf("%s: prometheus.io/port %q is not a port serving /metrics", name, ann["prometheus.io/port"])
	}
	if l, ok := byPort[int32(port)]; ok && p.gw != nil && l.envVar == "EASEL_HTTP_ADDR" {
		t.Errorf("%s: metrics scraped from the public API port", name)
	}
}

// checkDockerfile: the manifest runs the image the Dockerfile builds, as it
// builds it: its tag name, its entrypoint, its user, its exposed port.
func checkDockerfile(t *testing.T, p *easelPod) {
	name := "deployment " + p.dep.Name
	src, err := os.ReadFile(p.bin.dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`docker build .*-t ([a-z0-9._/-]+)`).FindSubmatch(src); m == nil || imageRepo(string(m[1])) != imageRepo(p.c.Image) {
		t.Errorf("%s runs image %s; %s says it builds %q", name, p.c.Image, p.bin.dockerfile, m)
	}
	ast, err := parser.Parse(strings.NewReader(string(src)))
	if err != nil {
		t.Fatalf("%s: %v", p.bin.dockerfile, err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatalf("%s: %v", p.bin.dockerfile, err)
	}
	final := stages[len(stages)-1]
	var user string
	var entrypoint []string
	var exposed []string
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = c.CmdLine
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		}
	}
	if len(p.c.Command) > 0 && !slices.Equal(p.c.Command, entrypoint) {
		t.Errorf("%s: command %v replaces the image's entrypoint %v", name, p.c.Command, entrypoint)
	}
	if len(p.c.Args) > 0 {
		t.Errorf("%s: args %v; the binaries take none (configuration is environment variables)", name, p.c.Args)
	}
	for _, e := range exposed {
		n, _ := strconv.Atoi(strings.TrimSuffix(e, "/tcp"))
		if _, ok := containerPort(p.c, intstr.FromInt(n)); !ok {
			t.Errorf("%s: the image exposes %s, which the container does not declare", name, e)
		}
	}
	uid, gid, _ := strings.Cut(user, ":")
	if want := runAs(p.dep.Spec.Template.Spec, p.c); want == nil || strconv.FormatInt(*want, 10) != uid {
		t.Errorf("%s: runs as user %v; the image's USER is %s", name, want, user)
	}
	if g := p.dep.Spec.Template.Spec.SecurityContext.RunAsGroup; gid != "" && (g == nil || strconv.FormatInt(*g, 10) != gid) {
		t.Errorf("%s: runs as group %v; the image's USER is %s", name, g, user)
	}
}

func runAs(ps corev1.PodSpec, c corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if ps.SecurityContext != nil {
		return ps.SecurityContext.RunAsUser
	}
	return nil
}

// checkGrace: Kubernetes waits long enough for a graceful stop. A worker
// gives running jobs EASEL_SHUTDOWN_TIMEOUT, which must cover a whole
// generation (a source fetch plus one model call), then closes its health
// listener (5 s); a gateway sleeps in preStop, then drains requests for
// EASEL_SHUTDOWN_TIMEOUT.
func checkGrace(t *testing.T, p *easelPod) {
	spec := p.dep.Spec.Template.Spec
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	var preStop time.Duration
	if l := p.c.Lifecycle; l != nil && l.PreStop != nil {
		if l.PreStop.Sleep == nil {
			t.Errorf("deployment %s: preStop other than sleep (the image has no shell)", p.dep.Name)
		} else {
			preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
		}
	}
	switch {
	case p.gw != nil:
		if need := preStop + p.gw.ShutdownTimeout + 5*time.Second; grace < need {
			t.Errorf("deployment %s: terminationGracePeriodSeconds %s < preStop %s + EASEL_SHUTDOWN_TIMEOUT %s + 5s", p.dep.Name, grace, preStop, p.gw.ShutdownTimeout)
		}
	case p.wk != nil:
		generation := p.wk.FetchTimeout + p.wk.GeminiTimeout
		if p.wk.ShutdownTimeout < generation {
			t.Errorf("deployment %s: EASEL_SHUTDOWN_TIMEOUT %s is shorter than a generation can take (EASEL_FETCH_TIMEOUT + EASEL_GEMINI_TIMEOUT = %s)", p.dep.Name, p.wk.ShutdownTimeout, generation)
		}
		if need := preStop + p.wk.ShutdownTimeout + 10*time.Second; grace < need {
			t.Errorf("deployment %s: terminationGracePeriodSeconds %s < EASEL_SHUTDOWN_TIMEOUT %s + 10s", p.dep.Name, grace, p.wk.ShutdownTimeout)
		}
	}
}

// checkResources: requests and limits set, limits above requests, memory
// requests above the measured peaks.
func checkResources(t *testing.T, p *easelPod) {
	name := "deployment " + p.dep.Name
	req, lim := p.c.Resources.Requests, p.c.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, ok := req[r]
		if !ok || q.IsZero() {
			t.Errorf("%s: no %s request", name, r)
		}
		if l, ok := lim[r]; !ok {
			t.Errorf("%s: no %s limit", name, r)
		} else if l.Cmp(q) < 0 {
			t.Errorf("%s: %s limit %s below its request %s", name, r, l.String(), q.String())
		}
	}
	measured := int64(measuredGatewayRSS)
	if p.wk != nil {
		measured = measuredWorkerRSS
	}
	if m := req[corev1.ResourceMemory]; m.Value() < measured {
		t.Errorf("%s: memory request %s is below the measured peak RSS of %d MiB", name, m.String(), measured>>20)
	}
	if m := lim[corev1.ResourceMemory]; m.Cmp(*resource.NewQuantity(2*measured, resource.BinarySI)) < 0 {
		t.Errorf("%s: memory limit %s leaves less than twice the measured peak RSS", name, m.String())
	}
}

// checkMemoryLimit: the Go memory limit each Easel container runs with,
// as its binary derives it at start (service.SetMemoryLimit: GOMEMLIMIT
// from the image or the manifest, else 90% of the container's memory limit
// read from its cgroup, else the worker's decode budget plus an
// allowance), is below the container's memory limit with headroom, and
// above what the process holds at rest plus, for a worker, its decode
// budget: under it the garbage collector would run without end.
func checkMemoryLimit(t *testing.T, p *easelPod) {
	name := "deployment " + p.dep.Name
	lim, ok := p.c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return // checkResources says so
	}
	env := dockerfileEnv(t, p.bin.dockerfile)
	for k, v := range p.env {
		env[k] = v
	}
	cgroup := t.TempDir()
	if err := os.WriteFile(filepath.Join(cgroup, "memory.max"), []byte(strconv.FormatInt(lim.Value(), 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fallback := service.MemoryLimit{Source: service.SourceNone}
	floor, why := int64(measuredGatewayRSS), "the gateway's measured peak RSS"
	if p.wk != nil {
		fallback = p.wk.FallbackMemoryLimit()
		floor = int64(p.wk.DecodeBudgetMB)<<20 + measuredWorkerRSS
		why = fmt.Sprintf("EASEL_DECODE_BUDGET_MB (%d MiB) plus the worker's measured RSS at rest", p.wk.DecodeBudgetMB)
	}
	got, err := service.ChooseMemoryLimit(func(k string) string { return env[k] }, cgroup, fallback)
	switch {
	case err != nil:
		t.Errorf("%s: %v", name, err)
	case got.Bytes <= 0 || got.Bytes == math.MaxInt64:
		t.Errorf("%s: runs with no Go memory limit (%s) under a %s memory limit", name, got.Source, lim.String())
	case got.Bytes > lim.Value()/100*95:
		t.Errorf("%s: Go memory limit %d MiB (%s) leaves less than 5%% of the container's %s for what the Go runtime does not count", name, got.Bytes>>20, got.Source, lim.String())
	case got.Bytes < floor:
		t.Errorf("%s: Go memory limit %d MiB (%s) is below %s, %d MiB", name, got.Bytes>>20, got.Source, why, floor>>20)
	}
	// Without a container limit (docker run, compose), a worker still
	// bounds its heap, above its decode budget.
	if p.wk != nil {
		if got, err := service.ChooseMemoryLimit(func(k string) string { return env[k] }, t.TempDir(), fallback); err != nil || got.Source != service.SourceEnv && got.Bytes < floor {
			t.Errorf("%s: without a container limit the Go memory limit is %d MiB (%s, %v); want at least %d MiB", name, got.Bytes>>20, got.Source, err, floor>>20)
		}
	}
}

// dockerfileEnv is the environment the final stage of a Dockerfile sets.
func dockerfileEnv(t *testing.T, dockerfile string) map[string]string {
	t.Helper()
	src, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	ast, err := parser.Parse(strings.NewReader(string(src)))
	if err != nil {
		t.Fatalf("%s: %v", dockerfile, err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatalf("%s: %v", dockerfile, err)
	}
	env := map[string]string{}
	for _, c := range stages[len(stages)-1].Commands {
		if e, ok := c.(*instructions.EnvCommand); ok {
			for _, kv := range e.Env {
				env[kv.Key] = kv.Value
			}
		}
	}
	return env
}

// checkPodSecurity: every pod of the build (Easel's and the dev overlay's
// Redis, MinIO and bucket Job) runs as non-root on a read-only root
// filesystem, with no capabilities, no privilege escalation, the runtime's
// seccomp profile, no host paths and no service account token.
func checkPodSecurity(t *testing.T, objs *objects) {
	type pod struct {
		name string
		spec corev1.PodSpec
	}
	var pods []pod
	for _, d := range objs.deployments {
		pods = append(pods, pod{"deployment " + d.Name, d.Spec.Template.Spec})
	}
	for _, j := range objs.jobs {
		pods = append(pods, pod{"job " + j.Name, j.Spec.Template.Spec})
	}
	for _, p := range pods {
		ps := p.spec.SecurityContext
		if p.spec.AutomountServiceAccountToken == nil || *p.spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a service account token", p.name)
		}
		if p.spec.HostNetwork || p.spec.HostPID || p.spec.HostIPC {
			t.Errorf("%s shares a host namespace", p.name)
		}
		for _, v := range p.spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s mounts host path %s", p.name, v.HostPath.Path)
			}
		}
		for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
			cs := c.SecurityContext
			if cs == nil {
				t.Errorf("%s: container %s has no securityContext", p.name, c.Name)
				continue
			}
			nonRoot := cs.RunAsNonRoot != nil && *cs.RunAsNonRoot || cs.RunAsNonRoot == nil && ps != nil && ps.RunAsNonRoot != nil && *ps.RunAsNonRoot
			if !nonRoot {
				t.Errorf("%s: container %s may run as root (runAsNonRoot)", p.name, c.Name)
			}
			if u := runAs(p.spec, c); u != nil && *u == 0 {
				t.Errorf("%s: container %s runs as uid 0", p.name, c.Name)
			}
			seccomp := cs.SeccompProfile
			if seccomp == nil && ps != nil {
				seccomp = ps.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: container %s without seccomp RuntimeDefault", p.name, c.Name)
			}
			if cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
				t.Errorf("%s: container %s has a writable root filesystem", p.name, c.Name)
			}
			if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
				t.Errorf("%s: container %s allows privilege escalation", p.name, c.Name)
			}
			if cs.Privileged != nil && *cs.Privileged {
				t.Errorf("%s: container %s is privileged", p.name, c.Name)
			}
			if cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") || len(cs.Capabilities.Add) > 0 {
				t.Errorf("%s: container %s does not drop all capabilities", p.name, c.Name)
			}
			if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
				t.Errorf("%s: container %s has no memory request", p.name, c.Name)
			}
			if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
				t.Errorf("%s: container %s has no memory limit", p.name, c.Name)
			}
		}
	}
}

func selects(t *testing.T, sel *metav1.LabelSelector, d *appsv1.Deployment) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(labels.Set(d.Spec.Template.Labels))
}

// checkSelectors: Deployments select their own pods and nobody else's;
// Services and PodDisruptionBudgets select one Deployment's pods, and a
// Service's target ports are ports those pods declare.
func checkSelectors(t *testing.T, objs *objects) {
	for _, d := range objs.deployments {
		if !selects(t, d.Spec.Selector, d) {
			t.Errorf("deployment %s: selector %v does not match its pod labels %v", d.Name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		for _, o := range objs.deployments {
			if o != d && selects(t, d.Spec.Selector, o) {
				t.Errorf("deployment %s's selector also matches deployment %s's pods", d.Name, o.Name)
			}
		}
	}
	matching := func(sel *metav1.LabelSelector) []*appsv1.Deployment {
		var out []*appsv1.Deployment
		for _, d := range objs.deployments {
			if selects(t, sel, d) {
				out = append(out, d)
			}
		}
		return out
	}
	for _, s := range objs.services {
		ds := matching(&metav1.LabelSelector{MatchLabels: s.Spec.Selector})
		if len(ds) != 1 {
			t.Errorf("service %s selects the pods of %d Deployments; want 1", s.Name, len(ds))
			continue
		}
		for _, sp := range s.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			found := false
			for _, c := range ds[0].Spec.Template.Spec.Containers {
				if _, ok := containerPort(c, target); ok {
					found = true
				}
			}
			if !found {
				t.Errorf("service %s: port %s targets %s, which deployment %s does not declare", s.Name, sp.Name, target.String(), ds[0].Name)
			}
		}
	}
	for _, pdb := range objs.pdbs {
		ds := matching(pdb.Spec.Selector)
		if len(ds) != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %d Deployments; want 1", pdb.Name, len(ds))
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: set one of minAvailable and maxUnavailable", pdb.Name)
		}
	}
}

// checkAutoscalers: each autoscaler targets a real Deployment, no
// Deployment has two, autoscaled Deployments leave replicas to them, the
// gateway's HPA scales on CPU (so its pods request CPU) and keeps more pods
// than its PodDisruptionBudget must keep available.
func checkAutoscalers(t *testing.T, objs *objects, pods []*easelPod) {
	scaledBy := map[string]string{}
	target := func(who, apiVersion, kind, name string) *appsv1.Deployment {
		if other, dup := scaledBy[name]; dup {
			t.Errorf("%s and %s both scale deployment %s", who, other, name)
		}
		scaledBy[name] = who
		if kind != "" && kind != "Deployment" || apiVersion != "" && apiVersion != "apps/v1" {
			t.Errorf("%s targets %s %s; want an apps/v1 Deployment", who, apiVersion, kind)
		}
		d := objs.deployment(name)
		if d == nil {
			t.Errorf("%s targets deployment %s, which is not in the build", who, name)
			return nil
		}
		if d.Spec.Replicas != nil {
			t.Errorf("deployment %s sets replicas, which %s owns (every apply would reset them)", name, who)
		}
		return d
	}
	for _, h := range objs.hpas {
		ref := h.Spec.ScaleTargetRef
		d := target("HPA "+h.Name, ref.APIVersion, ref.Kind, ref.Name)
		if d == nil {
			continue
		}
		minR := int32(1)
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		if minR > h.Spec.MaxReplicas {
			t.Errorf("HPA %s: minReplicas %d > maxReplicas %d", h.Name, minR, h.Spec.MaxReplicas)
		}
		cpu := false
		for _, m := range h.Spec.Metrics {
			if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil {
				cpu = true
				if u := *m.Resource.Target.AverageUtilization; u < 30 || u > 90 {
					t.Errorf("HPA %s: CPU utilization target %d%%", h.Name, u)
				}
			}
		}
		if !cpu {
			t.Errorf("HPA %s does not scale on CPU utilization", h.Name)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
				t.Errorf("HPA %s scales on CPU utilization but container %s requests no CPU", h.Name, c.Name)
			}
		}
		for _, pdb := range objs.pdbs {
			if selects(t, pdb.Spec.Selector, d) && pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(minR) {
				t.Errorf("PodDisruptionBudget %s keeps %s available, HPA %s may scale to %d: no node could be drained", pdb.Name, pdb.Spec.MinAvailable.String(), h.Name, minR)
			}
		}
	}
	for _, so := range objs.scaledObjects {
		if so.Spec.ScaleTargetRef == nil {
			t.Errorf("ScaledObject %s has no scaleTargetRef", so.Name)
			continue
		}
		ref := so.Spec.ScaleTargetRef
		target("ScaledObject "+so.Name, ref.APIVersion, ref.Kind, ref.Name)
	}
	for _, p := range pods {
		if scaledBy[p.dep.Name] == "" {
			t.Errorf("deployment %s has no autoscaler", p.dep.Name)
		}
		if p.gw != nil && !strings.HasPrefix(scaledBy[p.dep.Name], "HPA ") {
			t.Errorf("the gateway is scaled by %q; want an HPA on CPU", scaledBy[p.dep.Name])
		}
		if p.wk != nil && !strings.HasPrefix(scaledBy[p.dep.Name], "ScaledObject ") {
			t.Errorf("worker %s is scaled by %q; want a KEDA ScaledObject", p.dep.Name, scaledBy[p.dep.Name])
		}
	}
}

// asynqKey is the Redis key of a queue's list in Asynq (internal/base:
// QueueKeyPrefix + "pending" or "active"); TestQueueKeys checks it against
// the running Asynq.
func asynqKey(queue, list string) string { return "asynq:{" + queue + "}:" + list }

var formulaIdent = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// checkKEDA: each worker's ScaledObject reads its own queue's lists on the
// Redis the worker uses, with the password the worker uses, and aims at
// one replica for every EASEL_WORKER_CONCURRENCY queued or running jobs.
func checkKEDA(t *testing.T, objs *objects, pods []*easelPod) {
	if len(objs.scaledObjects) == 0 {
		t.Fatal("no ScaledObjects")
	}
	for _, so := range objs.scaledObjects {
		name := "ScaledObject " + so.Name
		var p *easelPod
		for _, x := range pods {
			if so.Spec.ScaleTargetRef != nil && x.dep.Name == so.Spec.ScaleTargetRef.Name && x.wk != nil {
				p = x
			}
		}
		if p == nil {
			t.Errorf("%s does not scale a worker Deployment", name)
			continue
		}
		queue := workerQueue(t, p)
		minR, maxR := int32(0), int32(100)
		if so.Spec.MinReplicaCount != nil {
			minR = *so.Spec.MinReplicaCount
		}
		if so.Spec.MaxReplicaCount != nil {
			maxR = *so.Spec.MaxReplicaCount
		}
		if minR > maxR || maxR < 1 {
			t.Errorf("%s: min %d, max %d replicas", name, minR, maxR)
		}
		redisURL, err := url.Parse(p.env["EASEL_REDIS_URL"])
		if err != nil {
			t.Errorf("%s: worker EASEL_REDIS_URL: %v", name, err)
			continue
		}
		db := strings.TrimPrefix(redisURL.Path, "/")
		if db == "" {
			db = "0"
		}
		password, _ := redisURL.User.Password()
		triggers := map[string]scaleTrigger{}
		lists := map[string]bool{}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != "redis" {
				t.Errorf("%s: trigger %q of type %s; want redis (the list scaler)", name, tr.Name, tr.Type)
				continue
			}
			for k := range tr.Metadata {
				if !redisScalerMetadata[k] {
					t.Errorf("%s: trigger %q: the redis scaler has no metadata %q", name, tr.Name, k)
				}
			}
			md := tr.Metadata
			want := map[string]bool{asynqKey(queue, "pending"): true, asynqKey(queue, "active"): true}
			if !want[md["listName"]] {
				t.Errorf("%s: trigger %q reads %q; deployment %s serves queue %s, whose lists are %s and %s", name, tr.Name, md["listName"], p.dep.Name, queue, asynqKey(queue, "pending"), asynqKey(queue, "active"))
			}
			if lists[md["listName"]] {
				t.Errorf("%s: %s read twice", name, md["listName"])
			}
			lists[md["listName"]] = true
			if n, err := strconv.Atoi(md["listLength"]); err != nil || n < 1 {
				t.Errorf("%s: trigger %q: listLength %q", name, tr.Name, md["listLength"])
			}
			if md["address"] != redisURL.Host {
				t.Errorf("%s: trigger %q reads Redis at %q; the worker uses %q", name, tr.Name, md["address"], redisURL.Host)
			}
			if d := md["databaseIndex"]; d != db && !(d == "" && db == "0") {
				t.Errorf("%s: trigger %q reads database %q; the worker uses %q", name, tr.Name, d, db)
			}
			if tls := redisURL.Scheme == "rediss"; tls != (md["enableTLS"] == "true") {
				t.Errorf("%s: trigger %q: enableTLS %q for a %s:// URL", name, tr.Name, md["enableTLS"], redisURL.Scheme)
			}
			if password != "" {
				checkRedisAuth(t, objs, name, tr, password)
			}
			if tr.Name != "" {
				triggers[tr.Name] = tr
			}
		}
		if !lists[asynqKey(queue, "pending")] {
			t.Errorf("%s does not read queue %s's pending list %s", name, queue, asynqKey(queue, "pending"))
		}
		adv := so.Spec.Advanced
		if len(so.Spec.Triggers) > 1 {
			if adv == nil || adv.ScalingModifiers.Formula == "" {
				t.Errorf("%s: several triggers without a scalingModifiers formula (KEDA would take the largest, not the sum)", name)
				continue
			}
		}
		if adv != nil && adv.ScalingModifiers.Formula != "" {
			sm := adv.ScalingModifiers
			for _, id := range formulaIdent.FindAllString(sm.Formula, -1) {
				if _, ok := triggers[id]; !ok {
					t.Errorf("%s: formula %q names %q, which is no trigger's name", name, sm.Formula, id)
				}
			}
			if len(triggers) != len(so.Spec.Triggers) {
				t.Errorf("%s: with a formula every trigger needs a name", name)
			}
			if target, err := strconv.Atoi(sm.Target); err != nil || target != p.wk.Concurrency {
				t.Errorf("%s: target %q; want the worker's EASEL_WORKER_CONCURRENCY, %d jobs a replica", name, sm.Target, p.wk.Concurrency)
			}
			if sm.MetricType != "" && sm.MetricType != "AverageValue" {
				t.Errorf("%s: metricType %s; want AverageValue (jobs per replica)", name, sm.MetricType)
			}
		}
	}
	if len(objs.scaledObjects) != len(jobs.Queues()) {
		t.Errorf("%d ScaledObjects for %d queues", len(objs.scaledObjects), len(jobs.Queues()))
	}
}

// checkRedisAuth: the trigger authenticates with the password in the
// workers' Redis URL.
func checkRedisAuth(t *testing.T, objs *objects, name string, tr scaleTrigger, password string) {
	if tr.AuthenticationRef == nil {
		t.Errorf("%s: trigger %q has no authenticationRef; Redis needs a password", name, tr.Name)
		return
	}
	if k := tr.AuthenticationRef.Kind; k != "" && k != "TriggerAuthentication" {
		t.Errorf("%s: authenticationRef kind %s", name, k)
	}
	var ta *triggerAuthentication
	for _, x := range objs.triggerAuths {
		if x.Name == tr.AuthenticationRef.Name {
			ta = x
		}
	}
	if ta == nil {
		t.Errorf("%s: TriggerAuthentication %s is not in the build", name, tr.AuthenticationRef.Name)
		return
	}
	got := ""
	for _, ref := range ta.Spec.SecretTargetRef {
		if !redisScalerAuthParams[ref.Parameter] {
			t.Errorf("TriggerAuthentication %s: the redis scaler takes no parameter %q", ta.Name, ref.Parameter)
		}
		s := objs.secret(ref.Name)
		if s == nil {
			t.Errorf("TriggerAuthentication %s: Secret %s is not in the build", ta.Name, ref.Name)
			continue
		}
		v, ok := secretValue(s, ref.Key)
		if !ok {
			t.Errorf("TriggerAuthentication %s: Secret %s has no key %s", ta.Name, ref.Name, ref.Key)
		}
		if ref.Parameter == "password" {
			got = v
		}
	}
	if got != password {
		t.Errorf("%s: TriggerAuthentication %s gives a password other than the one in EASEL_REDIS_URL", name, ta.Name)
	}
}

// serviceAt finds the Service a URL host names ("minio", "minio.easel",
// "minio.easel.svc.cluster.local") and checks it has the port.
func serviceAt(t *testing.T, objs *objects, what, hostport string) {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s %q: %v", what, hostport, err)
		return
	}
	name, _, _ := strings.Cut(host, ".")
	for _, s := range objs.services {
		if s.Name != name {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if strconv.Itoa(int(sp.Port)) == port {
				return
			}
		}
		t.Errorf("%s %s: service %s has no port %s", what, hostport, name, port)
		return
	}
	t.Errorf("%s %s: no service %s in the build", what, hostport, name)
}

// checkStorage: gateway and workers share one S3 location; in the dev
// overlay it is the MinIO in the build, whose root user is the services'
// credentials, and a Job creates the bucket with a one-day lifecycle rule.
func checkStorage(t *testing.T, objs *objects, pods []*easelPod) {
	var blobURL, endpoint, accessKey, secretKey string
	for i, p := range pods {
		if i == 0 {
			blobURL, endpoint, accessKey, secretKey = p.env["EASEL_BLOB_URL"], p.env["EASEL_S3_ENDPOINT"], p.env["EASEL_S3_ACCESS_KEY_ID"], p.env["EASEL_S3_SECRET_ACCESS_KEY"]
		}
		if p.env["EASEL_BLOB_URL"] != blobURL || p.env["EASEL_S3_ENDPOINT"] != endpoint || p.env["EASEL_S3_ACCESS_KEY_ID"] != accessKey {
			t.Errorf("deployment %s stores results elsewhere than deployment %s", p.dep.Name, pods[0].dep.Name)
		}
	}
	u, err := url.Parse(blobURL)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		t.Fatalf("EASEL_BLOB_URL %q: pods share no disk, results go to S3 (s3://bucket/prefix)", blobURL)
	}
	bucket, prefix := u.Host, strings.TrimPrefix(u.Path, "/")
	if endpoint == "" {
		return // AWS itself
	}
	eu, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("EASEL_S3_ENDPOINT %q: %v", endpoint, err)
	}
	serviceAt(t, objs, "EASEL_S3_ENDPOINT", eu.Host)
	minio := objs.deployment(strings.SplitN(eu.Hostname(), ".", 2)[0])
	if minio == nil {
		t.Fatalf("no Deployment behind EASEL_S3_ENDPOINT %s", endpoint)
	}
	menv, _ := resolveEnv(t, objs, minio.Spec.Template.Spec.Containers[0])
	if menv["MINIO_ROOT_USER"] != accessKey || menv["MINIO_ROOT_PASSWORD"] != secretKey {
		t.Errorf("MinIO's root user is not the services' EASEL_S3_ACCESS_KEY_ID / EASEL_S3_SECRET_ACCESS_KEY")
	}
	if len(objs.jobs) != 1 {
		t.Fatalf("%d Jobs; want the one that creates the bucket", len(objs.jobs))
	}
	job := objs.jobs[0]
	c := job.Spec.Template.Spec.Containers[0]
	script := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	jenv, _ := resolveEnv(t, objs, c)
	hostURL := ""
	for k, v := range jenv {
		if alias, ok := strings.CutPrefix(k, "MC_HOST_"); ok && strings.Contains(script, "mc mb --ignore-existing "+alias+"/"+bucket) {
			hostURL = v
		}
	}
	if hostURL == "" {
		t.Fatalf("job %s does not create bucket %s (mc mb --ignore-existing ALIAS/%s, ALIAS from MC_HOST_ALIAS): %s", job.Name, bucket, bucket, script)
	}
	hu, err := url.Parse(hostURL)
	if err != nil {
		t.Fatalf("job %s: MC_HOST_: %v", job.Name, err)
	}
	if pw, _ := hu.User.Password(); hu.Host != eu.Host || hu.User.Username() != accessKey || pw != secretKey {
		t.Errorf("job %s talks to %s as %s, not to EASEL_S3_ENDPOINT with the services' credentials", job.Name, hu.Host, hu.User.Username())
	}
	if !strings.Contains(script, "mc ilm import ") || !strings.Contains(script, "/"+bucket+" < /config/results-lifecycle.json") {
		t.Errorf("job %s does not import the lifecycle rule into %s: %s", job.Name, bucket, script)
	}
	var lifecycle []byte
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			if cm := objs.configMap(v.ConfigMap.Name); cm != nil {
				lifecycle = []byte(cm.Data["results-lifecycle.json"])
			}
		}
	}
	checkLifecycle(t, lifecycle, prefix)
}

// checkLifecycle: the rule expires results (under the prefix the services
// write) a day after they were written; their URLs are valid for 24 hours.
func checkLifecycle(t *testing.T, doc []byte, prefix string) {
	var lc struct {
		Rules []struct {
			ID         string
			Status     string
			Filter     struct{ Prefix string }
			Expiration struct{ Days int }
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lc); err != nil {
		t.Fatalf("lifecycle rule %q: %v", doc, err)
	}
	if len(lc.Rules) != 1 {
		t.Fatalf("lifecycle: %d rules; want 1", len(lc.Rules))
	}
	r := lc.Rules[0]
	if r.Status != "Enabled" || r.Expiration.Days != 1 || !strings.HasPrefix(prefix, r.Filter.Prefix) || r.ID == "" {
		t.Errorf("lifecycle rule %+v; want an enabled rule expiring %q after 1 day", r, prefix)
	}
}

// checkRedis: in the dev overlay the services' Redis is the one in the
// build, protected by the password their URL carries.
func checkRedis(t *testing.T, objs *objects, pods []*easelPod) {
	u, err := url.Parse(pods[0].env["EASEL_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.env["EASEL_REDIS_URL"] != pods[0].env["EASEL_REDIS_URL"] {
			t.Errorf("deployment %s uses another Redis than deployment %s", p.dep.Name, pods[0].dep.Name)
		}
	}
	serviceAt(t, objs, "EASEL_REDIS_URL", u.Host)
	redis := objs.deployment(u.Hostname())
	if redis == nil {
		t.Fatalf("no Deployment behind EASEL_REDIS_URL's host %s", u.Hostname())
	}
	c := redis.Spec.Template.Spec.Containers[0]
	env, _ := resolveEnv(t, objs, c)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a, env)
	}
	pw, _ := u.User.Password()
	if i := slices.Index(args, "--requirepass"); i < 0 || i+1 >= len(args) || args[i+1] != pw {
		t.Errorf("the dev Redis does not require the password of EASEL_REDIS_URL (args %v)", c.Args)
	}
}

func TestDevOverlayIsNotProduction(t *testing.T) {
	// The example secrets say what they are.
	b, err := os.ReadFile(devDir + "/dev-secrets.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") && !strings.Contains(v, "dev") {
			t.Errorf("dev-secrets.env: %s does not look like an example value", k)
		}
	}
}
