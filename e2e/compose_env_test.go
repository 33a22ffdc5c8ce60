package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	composecli "github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	gateway "github.com/easelhq/easel/api-gateway"
	"github.com/easelhq/easel/worker"
)

// loadComposeIn loads docker-compose.yml as the docker compose command
// does, in dir (a copy of the file beside whatever .env the test put there):
// the .env file beside it, when there is one, supplies the variables, and
// nothing comes from the test's own environment.
func loadComposeIn(t *testing.T, dir string) (*types.Project, error) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "docker-compose.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := composecli.NewProjectOptions([]string{path},
		composecli.WithWorkingDirectory(dir),
		composecli.WithEnv(nil),
		composecli.WithEnvFiles(), // the default: .env in the working directory
		composecli.WithDotEnv,
		composecli.WithName("easel"),
	)
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

// devKeyRE matches the local stack's dev key wherever it is written.
var devKeyRE = regexp.MustCompile(`esk_local_[A-Za-z0-9_]+`)

// readmeDevKey returns the dev key README.md gives, the one `make run`
// prints.
func readmeDevKey(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	keys := slices.Compact(devKeyRE.FindAllString(string(b), -1))
	if len(keys) != 1 {
		t.Fatalf("README.md gives dev keys %v; want one", keys)
	}
	return keys[0]
}

// Compose reads its variables from .env beside docker-compose.yml, and no
// command fails for want of one: `docker compose logs`, `ps` or `down` in a
// shell with nothing exported loads the project as any command does. The
// signing secret is then checked where it is used: the gateway refuses to
// start without one outside dev mode.
func TestDeployComposeWithoutDotEnv(t *testing.T) {
	for _, withExample := range []bool{false, true} {
		name := "no .env"
		if withExample {
			name = "only .env.example"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if withExample {
				copyFile(t, filepath.Join(repoRoot, ".env.example"), filepath.Join(dir, ".env.example"))
			}
			p, err := loadComposeIn(t, dir)
			if err != nil {
				t.Fatalf("docker compose logs/ps/down without .env: %v; want the project to load", err)
			}
			gw, err := p.GetService("gateway")
			if err != nil {
				t.Fatal(err)
			}
			env := envOf(gw)
			if env["EASEL_SIGNING_SECRET"] != "" || env["EASEL_DEV_API_KEY"] != "" || env["EASEL_DEV_MODE"] != "false" {
				t.Errorf("without .env the gateway gets secret %q, dev key %q, dev mode %q; want none, none, false",
					env["EASEL_SIGNING_SECRET"], env["EASEL_DEV_API_KEY"], env["EASEL_DEV_MODE"])
			}
			if _, err := gateway.LoadConfig(env); err == nil || !strings.Contains(err.Error(), "EASEL_SIGNING_SECRET is required") {
				t.Errorf("the gateway without a secret, outside dev mode: %v; want it refused for want of EASEL_SIGNING_SECRET", err)
			}
		})
	}
}

// The documented flow: cp .env.example .env (dev mode, the README's dev
// key), then a secret of the stack's own appended. Every service reads the
// values, and the gateway and workers accept them.
func TestDeployComposeDotEnv(t *testing.T) {
	key := readmeDevKey(t)
	example, err := os.ReadFile(filepath.Join(repoRoot, ".env.example"))
	if err != nil {
		t.Fatalf(".env.example: %v", err)
	}
	if keys := slices.Compact(devKeyRE.FindAllString(string(example), -1)); len(keys) != 1 || keys[0] != key {
		t.Errorf(".env.example gives dev keys %v; want the README's %s", keys, key)
	}
	secret := strings.Repeat("0123456789abcdef", 4)
	for _, withSecret := range []bool{false, true} {
		name := "cp .env.example .env"
		if withSecret {
			name += ", a secret appended"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			dotEnv := string(example)
			if withSecret {
				dotEnv += "EASEL_SIGNING_SECRET=" + secret + "\n"
			}
			if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(dotEnv), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := loadComposeIn(t, dir)
			if err != nil {
				t.Fatalf("docker-compose.yml with .env: %v", err)
			}
			gw, _ := p.GetService("gateway")
			wk, _ := p.GetService("worker")
			gwEnv, wkEnv := envOf(gw), envOf(wk)
			if gwEnv["EASEL_DEV_API_KEY"] != key || gwEnv["EASEL_DEV_MODE"] != "true" {
				t.Errorf("gateway dev key %q, dev mode %q; want the README's %s in dev mode", gwEnv["EASEL_DEV_API_KEY"], gwEnv["EASEL_DEV_MODE"], key)
			}
			want := ""
			if withSecret {
				want = secret
			}
			if gwEnv["EASEL_SIGNING_SECRET"] != want || wkEnv["EASEL_SIGNING_SECRET"] != want {
				t.Errorf("signing secrets: gateway %q, worker %q; want %q from .env for both", gwEnv["EASEL_SIGNING_SECRET"], wkEnv["EASEL_SIGNING_SECRET"], want)
			}
			if _, err := gateway.LoadConfig(gwEnv); err != nil {
				t.Errorf("the gateway refuses its configuration: %v", err)
			}
			if _, err := worker.LoadConfig(wkEnv); err != nil {
				t.Errorf("the worker refuses its configuration: %v", err)
			}
		})
	}
}

// The local stack has one dev key, the README's, wherever one is written
// (the README, the Makefile, docker-compose.yml's header, .env.example, the
// docs); the .env flow is the one docs/deploying.md and docker-compose.yml
// give; and .env, which holds a secret, is kept out of git and of the
// images' build context.
func TestDeployComposeDocsOneDevKey(t *testing.T) {
	key := readmeDevKey(t)
	files := []string{"Makefile", "docker-compose.yml", ".env.example"}
	docs, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	for _, d := range docs {
		rel, _ := filepath.Rel(repoRoot, d)
		files = append(files, rel)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range devKeyRE.FindAllString(string(b), -1) {
			if k != key {
				t.Errorf("%s gives the dev key %s; the README's is %s", f, k, key)
			}
		}
	}
	for _, f := range []string{"docker-compose.yml", "docs/deploying.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "cp .env.example .env") {
			t.Errorf("%s does not give the .env flow (cp .env.example .env)", f)
		}
		if regexp.MustCompile(`EASEL_SIGNING_SECRET=\$\(openssl[^)]*\)\s*\\`).Match(b) {
			t.Errorf("%s still has EASEL_SIGNING_SECRET exported on the compose command line; it lives in .env", f)
		}
	}
	for _, f := range []string{".gitignore", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if !slices.Contains(lines, ".env") && !slices.Contains(lines, "/.env") {
			t.Errorf("%s does not list .env, which holds the signing secret", f)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
