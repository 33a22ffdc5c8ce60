package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The OpenAPI linters, at pinned versions: installed with npm into the
// user's cache (never the repository) once, and reused.
const (
	redoclyCLI  = "@redocly/cli@2.77.0"
	spectralCLI = "@stoplight/spectral-cli@6.16.3"
)

// The linters' configurations: each one's standard ruleset. A rule turned
// off here is one that is wrong for this API, and docs/api.md ("The OpenAPI
// document") says which and why.
const (
	spectralConfig = `extends: ["spectral:oas"]
`
	redoclyConfig = `extends:
  - recommended
rules:
  # /healthz, /readyz and /openapi.json (GET and HEAD) answer no 4xx at all.
  operation-4xx-response: off
  # The project names no license, and the document does not invent one.
  info-license: off
`
)

// openapiLinter is one linter: how to run it on a document, in JSON for
// counting and in its own words for people.
type openapiLinter struct {
	name   string
	bin    string // under node_modules/.bin
	config string // its configuration file's name
	rules  string // the file's content
	args   func(config, doc, report string) []string
	// humanArgs are the arguments of a run whose output people read.
	humanArgs func(config, doc string) []string
	// problems counts the errors and warnings of the JSON report, which is
	// the file report or, if that is empty, the run's standard output.
	problems func(report, stdout []byte) (int, error)
}

var openapiLinters = []openapiLinter{
	{
		name:   "spectral (spectral:oas)",
		bin:    "spectral",
		config: ".spectral.yaml",
		rules:  spectralConfig,
		args: func(config, doc, report string) []string {
			return []string{"lint", "--ruleset", config, "--format", "json", "--output", report, doc}
		},
		humanArgs: func(config, doc string) []string {
			return []string{"lint", "--ruleset", config, "--format", "stylish", doc}
		},
		problems: func(report, _ []byte) (int, error) {
			var results []struct {
				Code     string `json:"code"`
				Severity int    `json:"severity"` // 0 error, 1 warning, 2 information, 3 hint
			}
			if err := json.Unmarshal(report, &results); err != nil {
				return 0, fmt.Errorf("reading spectral's JSON report: %w", err)
			}
			n := 0
			for _, r := range results {
				if r.Severity <= 1 {
					n++
				}
			}
			return n, nil
		},
	},
	{
		name:   "redocly (recommended)",
		bin:    "redocly",
		config: "redocly.yaml",
		rules:  redoclyConfig,
		args: func(config, doc, _ string) []string {
			return []string{"lint", "--config", config, "--format", "json", doc}
		},
		humanArgs: func(config, doc string) []string {
			return []string{"lint", "--config", config, "--format", "stylish", doc}
		},
		problems: func(_, stdout []byte) (int, error) {
			var report struct {
				Totals *struct {
					Errors   int `json:"errors"`
					Warnings int `json:"warnings"`
				} `json:"totals"`
			}
			if err := json.Unmarshal(stdout, &report); err != nil || report.Totals == nil {
				return 0, fmt.Errorf("reading redocly's JSON report: %v", err)
			}
			return report.Totals.Errors + report.Totals.Warnings, nil
		},
	},
}

// TestOpenAPILint lints the OpenAPI document the gateway serves
// (api-gateway/internal/api/openapi.json) with Spectral's spectral:oas
// ruleset and Redocly's recommended ruleset: any error or warning fails,
// with the linter's report. It needs npm and the npm registry (the first
// time), so it is not part of make test-short; without npm it fails.
func TestOpenAPILint(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the linters with npm: not part of make test-short")
	}
	t.Parallel()
	modules := installOpenAPILinters(t)
	doc, err := filepath.Abs(filepath.Join(repoRoot, "api-gateway", "internal", "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, l := range openapiLinters {
		if err := os.WriteFile(filepath.Join(dir, l.config), []byte(l.rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The check is not vacuous: the document with an unused schema added
	// fails both linters.
	broken := filepath.Join(dir, "broken.json")
	writeBrokenOpenAPI(t, doc, broken)

	for _, tt := range []struct {
		what  string
		doc   string
		clean bool
	}{
		{"openapi.json", doc, true},
		{"openapi.json with an unused schema", broken, false},
	} {
		for _, l := range openapiLinters {
			t.Run(tt.what+"/"+l.name, func(t *testing.T) {
				n, err := runOpenAPILinter(t, modules, dir, l, tt.doc)
				if err != nil {
					t.Fatalf("%s did not run: %v\n%s", l.name, err, nodeHint())
				}
				switch {
				case tt.clean && n > 0:
					out := humanLint(t, modules, dir, l, tt.doc)
					t.Errorf("%s finds %d errors and warnings in %s:\n%s", l.name, n, tt.what, out)
				case !tt.clean && n == 0:
					t.Errorf("%s finds nothing wrong with %s: is it linting at all?", l.name, tt.what)
				}
			})
		}
	}
}

// installOpenAPILinters returns the node_modules of the pinned linters,
// installing them with npm the first time (once, under a lock, however
// many test processes ask at the same time).
func installOpenAPILinters(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is not installed, and the OpenAPI lint needs it (Node.js and npm install the pinned linters %s and %s): "+
			"install Debian's nodejs and npm (apt-get install nodejs npm; .ci/run does when npm is missing)", redoclyCLI, spectralCLI)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache directory to install the linters in: %v", err)
	}
	version := strings.NewReplacer("@", "-", "/", "-").Replace(strings.TrimPrefix(redoclyCLI, "@") + "_" + strings.TrimPrefix(spectralCLI, "@"))
	root := filepath.Join(cache, "easel", "openapi-lint", version)
	modules := filepath.Join(root, "node_modules")
	installed := func() bool {
		for _, l := range openapiLinters {
			if _, err := os.Stat(filepath.Join(modules, ".bin", l.bin)); err != nil {
				return false
			}
		}
		return true
	}
	if installed() {
		return modules
	}
	parent := filepath.Dir(root)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(parent, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if installed() {
		return modules // installed by another process while this one waited
	}
	// Into a directory of its own, renamed into place once complete: an
	// interrupted install leaves nothing that looks installed.
	os.RemoveAll(root)
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--prefix", tmp, redoclyCLI, spectralCLI)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s %s: %v\n%s", redoclyCLI, spectralCLI, err, out)
	}
	if err := os.Rename(tmp, root); err != nil {
		t.Fatal(err)
	}
	if !installed() {
		t.Fatalf("npm installed %s and %s into %s, but not their commands", redoclyCLI, spectralCLI, root)
	}
	t.Logf("installed %s and %s into %s", redoclyCLI, spectralCLI, root)
	return modules
}

// lintEnv is the linters' environment: no telemetry, no update notices, no
// colours.
func lintEnv() []string {
	return append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1", "FORCE_COLOR=0")
}

// runOpenAPILinter runs a linter on doc with its configuration in dir and
// returns the number of errors and warnings it reports.
func runOpenAPILinter(t *testing.T, modules, dir string, l openapiLinter, doc string) (int, error) {
	t.Helper()
	report := filepath.Join(dir, l.bin+"-report.json")
	os.Remove(report)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(modules, ".bin", l.bin), l.args(filepath.Join(dir, l.config), doc, report)...)
	cmd.Dir = dir
	cmd.Env = lintEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return 0, runErr // it did not start
	}
	// Both exit 1 when they find problems: the report says how many.
	b, _ := os.ReadFile(report)
	n, err := l.problems(b, stdout.Bytes())
	if err != nil {
		return 0, fmt.Errorf("%v (exit: %v)\nstdout:\n%s\nstderr:\n%s", err, runErr, stdout.Bytes(), stderr.Bytes())
	}
	return n, nil
}

// humanLint runs a linter for its report in its own words.
func humanLint(t *testing.T, modules, dir string, l openapiLinter, doc string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(modules, ".bin", l.bin), l.humanArgs(filepath.Join(dir, l.config), doc)...)
	cmd.Dir = dir
	cmd.Env = lintEnv()
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// writeBrokenOpenAPI writes the document with an unused schema added,
// which both rulesets warn about.
func writeBrokenOpenAPI(t *testing.T, doc, to string) {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	components, _ := d["components"].(map[string]any)
	schemas, _ := components["schemas"].(map[string]any)
	if schemas == nil {
		t.Fatalf("%s has no components.schemas", doc)
	}
	schemas["NeverUsed"] = map[string]any{"type": "string", "description": "Referenced nowhere."}
	if b, err = json.MarshalIndent(d, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nodeHint names the Node.js the linters ran on, for a linter that could
// not run: an old one is the likely cause.
func nodeHint() string {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return fmt.Sprintf("node --version: %v", err)
	}
	return fmt.Sprintf("Node.js %s (%s needs 20.19 or a later 20, or 22.12 or later)", bytes.TrimSpace(out), redoclyCLI)
}
