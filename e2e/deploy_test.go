package e2e

import (
	"context"
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

func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
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
	}, func(o *loader.Options) { o.SetProjectName("easel", true) })
}

func TestComposeFile(t *testing.T) {
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

	envOf := func(s types.ServiceConfig) map[string]string {
		m := map[string]string{}
		for k, v := range s.Environment {
			if v != nil {
				m[k] = *v
			}
		}
		return m
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

	// Gateway and workers share the blob directory on one named volume.
	if gcfg.BlobDir != wcfg.BlobDir {
		t.Errorf("EASEL_BLOB_DIR differs: gateway %s, worker %s", gcfg.BlobDir, wcfg.BlobDir)
	}
	gv, wv := volumeAt(gw, gcfg.BlobDir), volumeAt(wk, wcfg.BlobDir)
	if gv == nil || wv == nil || gv.Type != "volume" || gv.Source != wv.Source {
		t.Errorf("blob volume not shared: gateway %+v worker %+v", gv, wv)
	}

	// Each service builds from its Dockerfile in deploy/.
	for _, s := range []types.ServiceConfig{gw, wk} {
		if s.Build == nil || !strings.HasPrefix(s.Build.Dockerfile, "deploy/") {
			t.Errorf("%s build %+v", s.Name, s.Build)
		}
	}
}

func TestComposeNeedsASigningSecret(t *testing.T) {
	_, err := loadCompose(t, map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "EASEL_SIGNING_SECRET") {
		t.Errorf("compose without a secret: %v; want an error naming EASEL_SIGNING_SECRET", err)
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

func TestDockerfiles(t *testing.T) {
	tests := []struct {
		file, pkg, binary, port string
	}{
		{"deploy/gateway.Dockerfile", "./api-gateway/cmd/gateway", "gateway", "8080"},
		{"deploy/worker.Dockerfile", "./worker/cmd/worker", "worker", "8081"},
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
					if strings.Contains(line, "CGO_ENABLED=0") && strings.Contains(line, "go build") && strings.Contains(line, tt.pkg) {
						staticBuild = true
					}
				}
			}
			if !staticBuild {
				t.Error("no static (CGO_ENABLED=0) go build of " + tt.pkg)
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
