package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/pkg/config"
	"github.com/easelhq/easel/worker"
)

// No Docker engine runs where the tests do, so docker-compose.yml and the
// Dockerfiles are checked by parsing them: valid, and consistent with the
// configuration the binaries read.

const repoRoot = ".."

func loadCompose(t *testing.T, env map[string]string, profiles ...string) (*types.Project, error) {
	t.Helper()
	path := filepath.Join(repoRoot, "docker-compose.yml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(repoRoot)
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  abs,
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: b}},
		Environment: env,
	}, func(o *loader.Options) {
		o.SetProjectName("easel", true)
		o.Profiles = profiles
	})
}

func TestDeployCompose(t *testing.T) {
	secret := strings.Repeat("s", 32)
	p, err := loadCompose(t, map[string]string{"EASEL_SIGNING_SECRET": secret})
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		return s
	}
	redis, gw, wk := svc("redis"), svc("gateway"), svc("worker")

	// Redis persists with AOF on a volume.
	if !slices.Contains(redis.Command, "--appendonly") || redis.Command[slices.Index(redis.Command, "--appendonly")+1] != "yes" {
		t.Errorf("redis command %v lacks --appendonly yes", redis.Command)
	}
	if !hasVolumeAt(redis, "/data") {
		t.Error("redis has no volume at /data")
	}

	// Two worker replicas.
	if wk.Deploy == nil || wk.Deploy.Replicas == nil || *wk.Deploy.Replicas != 2 {
		t.Errorf("worker replicas: %+v", wk.Deploy)
	}

	gwEnv, wkEnv := envOf(gw), envOf(wk)

	// Every variable is one the binaries read, and the binaries accept the
	// values.
	for name, svc := range map[string]struct {
		env   map[string]string
		reads []string
	}{"gateway": {gwEnv, config.Names(&gateway.Config{})}, "worker": {wkEnv, config.Names(&worker.Config{})}} {
		for k := range svc.env {
			if strings.HasPrefix(k, "EASEL_") && !slices.Contains(svc.reads, k) {
				t.Errorf("%s sets %s, which the %s does not read", name, k, name)
			}
		}
	}
	gcfg, err := gateway.LoadConfig(gwEnv)
	if err != nil {
		t.Errorf("the gateway would refuse its compose configuration: %v", err)
	}
	wcfg, err := worker.LoadConfig(wkEnv)
	if err != nil {
		t.Errorf("the worker would refuse its compose configuration: %v", err)
	}
	if gcfg.SigningSecret != secret {
		t.Error("the signing secret does not come from the environment")
	}

	// Redis URL points at the redis service.
	for name, c := range map[string]config.Common{"gateway": gcfg.Common, "worker": wcfg.Common} {
		u, err := url.Parse(c.RedisURL)
		if err != nil || u.Hostname() != "redis" || u.Port() != "6379" {
			t.Errorf("%s EASEL_REDIS_URL %q does not point at the redis service", name, c.RedisURL)
		}
	}

	// The gateway publishes the port it listens on.
	_, port, _ := net.SplitHostPort(gcfg.HTTPAddr)
	published := false
	for _, pc := range gw.Ports {
		if strconv.Itoa(int(pc.Target)) == port && pc.Published != "" {
			published = true
		}
	}
	if !published {
		t.Errorf("gateway listens on %s but ports are %+v", gcfg.HTTPAddr, gw.Ports)
	}
	// Every published port is on the host's loopback: the stack's dev key
	// is public, so nothing is reachable from other machines by default.
	for _, s := range p.Services {
		for _, pc := range s.Ports {
			if pc.Published != "" && pc.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s on %q, not 127.0.0.1", s.Name, pc.Published, pc.HostIP)
			}
		}
	}
	// The gateway and the workers say when they are ready: each probes its
	// own /readyz with the easelctl its image carries.
	for name, addr := range map[string]string{"gateway": gcfg.HTTPAddr, "worker": wcfg.HTTPAddr} {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		want := []string{"CMD", "easelctl", "probe", "http://127.0.0.1:" + port + "/readyz"}
		if s.HealthCheck == nil || !slices.Equal(s.HealthCheck.Test, want) {
			t.Errorf("%s healthcheck %+v; want test %v", name, s.HealthCheck, want)
		}
	}

	// Results go to the MinIO service, in a bucket the minio-bucket service
	// creates before either service starts.
	checkComposeS3(t, p, gcfg.Common, wcfg.Common)

	// Each service builds from its Dockerfile in deploy/.
	for _, s := range []types.ServiceConfig{gw, wk} {
		if s.Build == nil || !strings.HasPrefix(s.Build.Dockerfile, "deploy/") {
			t.Errorf("%s build %+v", s.Name, s.Build)
		}
	}
}

// checkComposeS3: gateway and workers share one S3 location, the minio
// service: reached at its API port, as its root user, in the bucket the
// minio-bucket service creates (with the one-day lifecycle rule) before
// either starts.
func checkComposeS3(t *testing.T, p *types.Project, gw, wk config.Common) {
	if gw.BlobURL != wk.BlobURL || gw.S3Endpoint != wk.S3Endpoint || gw.S3AccessKeyID != wk.S3AccessKeyID || gw.S3PathStyle != wk.S3PathStyle {
		t.Errorf("gateway and worker store results in different places: %s %s and %s %s", gw.BlobURL, gw.S3Endpoint, wk.BlobURL, wk.S3Endpoint)
	}
	u, err := url.Parse(gw.BlobURL)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		t.Fatalf("EASEL_BLOB_URL %q: compose keeps results in S3 (MinIO) by default", gw.BlobURL)
	}
	bucket := u.Host
	minio, err := p.GetService("minio")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := url.Parse(gw.S3Endpoint)
	if err != nil || ep.Hostname() != "minio" || ep.Port() != "9000" {
		t.Errorf("EASEL_S3_ENDPOINT %q does not point at the minio service's API (minio:9000)", gw.S3Endpoint)
	}
	if !gw.S3PathStyle {
		t.Error("EASEL_S3_PATH_STYLE is not true: MinIO serves buckets by path")
	}
	if !slices.Contains(minio.Command, "server") || !hasVolumeAt(minio, "/data") || !slices.Contains(minio.Command, "/data") {
		t.Errorf("minio: command %v, volumes %+v; want a server on a volume at /data", minio.Command, minio.Volumes)
	}
	if minio.HealthCheck == nil || len(minio.HealthCheck.Test) == 0 {
		t.Error("minio has no healthcheck: minio-bucket could start before it serves")
	}
	menv := envOf(minio)
	if menv["MINIO_ROOT_USER"] != gw.S3AccessKeyID || menv["MINIO_ROOT_PASSWORD"] != gw.S3SecretAccessKey || gw.S3AccessKeyID == "" {
		t.Error("the services' EASEL_S3_ACCESS_KEY_ID / EASEL_S3_SECRET_ACCESS_KEY are not MinIO's root user")
	}
	if len(menv["MINIO_ROOT_PASSWORD"]) < 8 {
		t.Error("MinIO refuses a root password under 8 characters")
	}

	mb, err := p.GetService("minio-bucket")
	if err != nil {
		t.Fatal(err)
	}
	if dep, ok := mb.DependsOn["minio"]; !ok || dep.Condition != types.ServiceConditionHealthy {
		t.Errorf("minio-bucket depends on %+v; want minio healthy", mb.DependsOn)
	}
	if mb.Restart != "no" {
		t.Errorf("minio-bucket restart %q; a one-shot service must not restart", mb.Restart)
	}
	benv := envOf(mb)
	script := strings.Join(append(slices.Clone(mb.Entrypoint), mb.Command...), " ")
	for _, want := range []string{
		"mc alias set easel http://minio:9000 \"$MINIO_ROOT_USER\" \"$MINIO_ROOT_PASSWORD\"",
		"mc mb --ignore-existing easel/" + bucket,
		"mc ilm import easel/" + bucket + " < /config/results-lifecycle.json",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("minio-bucket does not run %q: %s", want, script)
		}
	}
	if benv["MINIO_ROOT_USER"] != gw.S3AccessKeyID || benv["MINIO_ROOT_PASSWORD"] != gw.S3SecretAccessKey {
		t.Error("minio-bucket does not use MinIO's root user")
	}
	rule := volumeAt(mb, "/config/results-lifecycle.json")
	if rule == nil || rule.Type != "bind" || !rule.ReadOnly {
		t.Fatalf("minio-bucket has no read-only lifecycle rule at /config/results-lifecycle.json: %+v", mb.Volumes)
	}
	checkLifecycleRule(t, rule.Source, strings.TrimPrefix(u.Path, "/"))

	for _, name := range []string{"gateway", "worker"} {
		s, _ := p.GetService(name)
		if dep, ok := s.DependsOn["minio-bucket"]; !ok || dep.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s depends on %+v; want minio-bucket completed successfully", name, s.DependsOn)
		}
		for _, v := range s.Volumes {
			if v.Type == "volume" {
				t.Errorf("%s mounts volume %s: with results in S3 the services keep no state", name, v.Source)
			}
		}
	}
}

// checkLifecycleRule: the bucket's rule expires results (under the prefix
// the services write) a day after they were written.
func checkLifecycleRule(t *testing.T, path, prefix string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lc struct {
		Rules []struct {
			ID         string
			Status     string
			Filter     struct{ Prefix string }
			Expiration struct{ Days int }
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(lc.Rules) != 1 || lc.Rules[0].Status != "Enabled" || lc.Rules[0].Expiration.Days != 1 || !strings.HasPrefix(prefix, lc.Rules[0].Filter.Prefix) {
		t.Errorf("%s: %+v; want one enabled rule expiring %q after 1 day", path, lc.Rules, prefix)
	}
}

func envOf(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// TestDeployComposeAsynqmon: Asynq's web UI is an optional service behind the
// asynqmon profile, read-only, on the services' Redis, published on
// loopback only.
func TestDeployComposeAsynqmon(t *testing.T) {
	env := map[string]string{"EASEL_SIGNING_SECRET": strings.Repeat("s", 32)}
	p, err := loadCompose(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Services["asynqmon"]; ok {
		t.Error("asynqmon starts by default; want it behind a profile")
	}
	if _, ok := p.DisabledServices["asynqmon"]; !ok {
		t.Fatal("no asynqmon service")
	}
	p, err = loadCompose(t, env, "asynqmon")
	if err != nil {
		t.Fatal(err)
	}
	mon, err := p.GetService("asynqmon")
	if err != nil {
		t.Fatalf("asynqmon with its profile: %v", err)
	}
	if !slices.Contains(mon.Profiles, "asynqmon") {
		t.Errorf("asynqmon profiles %v", mon.Profiles)
	}
	gw, _ := p.GetService("gateway")
	easelRedis := envOf(gw)["EASEL_REDIS_URL"]
	if !slices.Contains(mon.Command, "--redis-url="+easelRedis) {
		t.Errorf("asynqmon command %v does not use the services' Redis %s", mon.Command, easelRedis)
	}
	if !slices.Contains(mon.Command, "--read-only") {
		t.Errorf("asynqmon command %v is not read-only", mon.Command)
	}
	if dep, ok := mon.DependsOn["redis"]; !ok || dep.Condition != types.ServiceConditionHealthy {
		t.Errorf("asynqmon depends on %+v; want redis healthy", mon.DependsOn)
	}
	if len(mon.Ports) != 1 || mon.Ports[0].HostIP != "127.0.0.1" || mon.Ports[0].Target != 8080 {
		t.Errorf("asynqmon ports %+v; want its 8080 on 127.0.0.1 only", mon.Ports)
	}
}

// Without a signing secret the project still loads (docker compose logs,
// ps and down need none), and the gateway, where the secret is used,
// refuses to start outside dev mode. (compose_env_test.go: the .env flow.)
func TestDeployComposeNeedsASigningSecret(t *testing.T) {
	p, err := loadCompose(t, map[string]string{})
	if err != nil {
		t.Fatalf("compose without a secret: %v; want the project to load", err)
	}
	gw, err := p.GetService("gateway")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.LoadConfig(envOf(gw)); err == nil || !strings.Contains(err.Error(), "EASEL_SIGNING_SECRET") {
		t.Errorf("the gateway without a secret: %v; want it refused, naming EASEL_SIGNING_SECRET", err)
	}
}

func hasVolumeAt(s types.ServiceConfig, target string) bool { return volumeAt(s, target) != nil }

func volumeAt(s types.ServiceConfig, target string) *types.ServiceVolumeConfig {
	for i := range s.Volumes {
		if s.Volumes[i].Target == target {
			return &s.Volumes[i]
		}
	}
	return nil
}

func TestDeployDockerfiles(t *testing.T) {
	tests := []struct {
		file, pkg, binary, port string
		// tags the static build needs: nodynamic keeps the WebP
		// encoder's purego loader (a dynamic link) out of the worker.
		tags string
	}{
		{"deploy/gateway.Dockerfile", "./api-gateway/cmd/gateway", "gateway", "8080", ""},
		{"deploy/worker.Dockerfile", "./worker/cmd/worker", "worker", "8081", "-tags nodynamic"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join(repoRoot, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ast, err := parser.Parse(f)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			stages, _, err := instructions.Parse(ast.AST, nil)
			if err != nil {
				t.Fatalf("instructions: %v", err)
			}
			if len(stages) < 2 {
				t.Fatalf("%d stages; want a multi-stage build", len(stages))
			}
			if _, err := os.Stat(filepath.Join(repoRoot, tt.pkg, "main.go")); err != nil {
				t.Errorf("built package %s: %v", tt.pkg, err)
			}
			build, final := stages[0], stages[len(stages)-1]
			staticBuild := false
			for _, c := range build.Commands {
				if r, ok := c.(*instructions.RunCommand); ok {
					line := strings.Join(r.CmdLine, " ")
					if strings.Contains(line, "CGO_ENABLED=0") && strings.Contains(line, "go build "+tt.tags) && strings.Contains(line, tt.pkg) {
						staticBuild = true
					}
				}
			}
			if !staticBuild {
				t.Errorf("no static (CGO_ENABLED=0) go build %s of %s", tt.tags, tt.pkg)
			}
			var user string
			var copied, entry, exposed bool
			for _, c := range final.Commands {
				switch c := c.(type) {
				case *instructions.UserCommand:
					user = c.User
				case *instructions.CopyCommand:
					copied = copied || (c.From == build.Name || c.From == "0") && strings.Contains(strings.Join(c.SourcePaths, " "), tt.binary)
				case *instructions.EntrypointCommand:
					entry = strings.HasSuffix(strings.Join(c.CmdLine, " "), "/"+tt.binary)
				case *instructions.ExposeCommand:
					exposed = slices.Contains(c.Ports, tt.port)
				}
			}
			if user == "" || user == "root" || strings.HasPrefix(user, "0") {
				t.Errorf("final stage runs as %q; want a non-root user", user)
			}
			if !copied || !entry {
				t.Errorf("final stage does not copy and run the %s binary (copied %v, entrypoint %v)", tt.binary, copied, entry)
			}
			if !exposed {
				t.Errorf("final stage does not expose %s", tt.port)
			}
		})
	}
}
