package upstream

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sa := filepath.Join(dir, "sa.json")
	if err := os.WriteFile(sa, []byte(`{"type":"service_account"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := env(map[string]string{"KEY_MAIN": "secret-from-env", "SA_PATH": sa})

	tests := []struct {
		name  string
		file  string
		check func(t *testing.T, p *Pool)
	}{
		{
			name: "gemini with api_key, defaults",
			file: `{"upstreams":[{"name":"main","provider":"gemini","api_key":"k1"}]}`,
			check: func(t *testing.T, p *Pool) {
				u := p.Upstreams[0]
				if u.Name != "main" || u.Provider != Gemini || u.APIKey != "k1" || u.Weight != 1 || len(u.Models) != 0 {
					t.Errorf("upstream %+v", u)
				}
				if p.Breaker != DefaultBreaker {
					t.Errorf("breaker %+v; want the defaults %+v", p.Breaker, DefaultBreaker)
				}
				if !u.Serves(catalog.Standard) || !u.Serves(catalog.Pro) {
					t.Error("an upstream with no models serves every tier")
				}
			},
		},
		{
			name: "gemini with api_key_env read through getenv",
			file: `{"upstreams":[{"name":"main","provider":"gemini","api_key_env":"KEY_MAIN","weight":3,"models":["pro"],"rpm":60,"concurrency":20,
				"base_url":"https://proxy.example.com/gemini","model_ids":{"pro":"gemini-pro-x"}}]}`,
			check: func(t *testing.T, p *Pool) {
				u := p.Upstreams[0]
				if u.APIKey != "secret-from-env" || u.APIKeyEnv != "KEY_MAIN" || u.Weight != 3 || u.RPM != 60 || u.Concurrency != 20 ||
					u.BaseURL != "https://proxy.example.com/gemini" || u.ModelIDs["pro"] != "gemini-pro-x" {
					t.Errorf("upstream %+v", u)
				}
				if u.Serves(catalog.Standard) || !u.Serves(catalog.Pro) {
					t.Error(`models ["pro"]: serves pro only`)
				}
			},
		},
		{
			name: "vertex with project, location and credentials_file",
			file: `{"upstreams":[{"name":"gcp-eu","provider":"vertex","project":"proj-1","location":"europe-west4","credentials_file":"` + sa + `","weight":2}]}`,
			check: func(t *testing.T, p *Pool) {
				u := p.Upstreams[0]
				if u.Provider != Vertex || u.Project != "proj-1" || u.Location != "europe-west4" || u.CredentialsFile != sa || u.Weight != 2 || u.APIKey != "" {
					t.Errorf("upstream %+v", u)
				}
			},
		},
		{
			name: "vertex with credentials_env",
			file: `{"upstreams":[{"name":"gcp","provider":"vertex","project":"p","location":"us-central1","credentials_env":"SA_PATH"}]}`,
			check: func(t *testing.T, p *Pool) {
				if u := p.Upstreams[0]; u.CredentialsFile != sa {
					t.Errorf("credentials file %q; want %q", u.CredentialsFile, sa)
				}
			},
		},
		{
			name: "vertex with default credentials",
			file: `{"upstreams":[{"name":"gcp","provider":"vertex","project":"p","location":"global"}]}`,
			check: func(t *testing.T, p *Pool) {
				if u := p.Upstreams[0]; u.CredentialsFile != "" {
					t.Errorf("credentials file %q", u.CredentialsFile)
				}
			},
		},
		{
			name: "several upstreams and breaker settings, durations as strings and seconds",
			file: `{"upstreams":[{"name":"a","provider":"gemini","api_key":"x"},{"name":"b.2_c-d","provider":"gemini","api_key":"y","weight":1000}],
				"breaker":{"failures":3,"cooldown":"2s","throttle":1.5,"max_throttle":"1m"}}`,
			check: func(t *testing.T, p *Pool) {
				if len(p.Upstreams) != 2 || p.Upstreams[1].Name != "b.2_c-d" || p.Upstreams[1].Weight != 1000 {
					t.Errorf("upstreams %+v", p.Upstreams)
				}
				want := Breaker{Failures: 3, Cooldown: Duration(2 * time.Second), Throttle: Duration(1500 * time.Millisecond), MaxThrottle: Duration(time.Minute)}
				if p.Breaker != want {
					t.Errorf("breaker %+v; want %+v", p.Breaker, want)
				}
			},
		},
		{
			name: "a throttle above the default max_throttle raises it",
			file: `{"upstreams":[{"name":"a","provider":"gemini","api_key":"x"}],"breaker":{"throttle":"10m"}}`,
			check: func(t *testing.T, p *Pool) {
				if p.Breaker.MaxThrottle != Duration(10*time.Minute) {
					t.Errorf("max_throttle %v; want 10m", time.Duration(p.Breaker.MaxThrottle))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.file), getenv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, p)
		})
	}
}

func TestParseRefusals(t *testing.T) {
	t.Parallel()
	getenv := env(map[string]string{"SET": "value"})
	gem := func(fields string) string {
		return `{"upstreams":[{"name":"u","provider":"gemini"` + fields + `}]}`
	}
	vtx := func(fields string) string {
		return `{"upstreams":[{"name":"v","provider":"vertex"` + fields + `}]}`
	}
	tests := []struct {
		name string
		file string
		want []string // every one in the message
	}{
		{"not JSON", `{"upstreams":`, []string{"upstreams file:"}},
		{"no upstreams key", `{}`, []string{"no upstreams"}},
		{"no upstreams", `{"upstreams":[]}`, []string{"no upstreams"}},
		{"unknown top-level field", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breakers":{}}`, []string{`unknown field "breakers"`}},
		{"unknown upstream field", gem(`,"apikey":"k"`), []string{`unknown field "apikey"`}},
		{"empty name", `{"upstreams":[{"provider":"gemini","api_key":"k"}]}`, []string{"upstreams[0]", "name: want 1 to 64"}},
		{"bad name", `{"upstreams":[{"name":"main key","provider":"gemini","api_key":"k"}]}`, []string{"upstreams[0] (main key)", "name: want 1 to 64"}},
		{"name with a brace (a Redis hash tag)", `{"upstreams":[{"name":"a}b","provider":"gemini","api_key":"k"}]}`, []string{"name: want"}},
		{"name too long", `{"upstreams":[{"name":"` + strings.Repeat("n", 65) + `","provider":"gemini","api_key":"k"}]}`, []string{"name: want 1 to 64"}},
		{"duplicate name", `{"upstreams":[{"name":"a","provider":"gemini","api_key":"k"},{"name":"a","provider":"gemini","api_key":"k2"}]}`,
			[]string{"upstreams[1] (a)", "the name is used twice"}},
		{"unknown provider", `{"upstreams":[{"name":"u","provider":"openai","api_key":"k"}]}`, []string{`provider "openai": want gemini or vertex`}},
		{"no provider", `{"upstreams":[{"name":"u","api_key":"k"}]}`, []string{`provider "": want gemini or vertex`}},
		{"missing key", gem(``), []string{"a gemini upstream needs api_key or api_key_env"}},
		{"env var unset", gem(`,"api_key_env":"UNSET_VAR"`), []string{"api_key_env: the variable UNSET_VAR is empty or unset"}},
		{"both api_key and api_key_env", gem(`,"api_key":"k","api_key_env":"SET"`), []string{"give api_key or api_key_env, not both"}},
		{"bad tier in models", gem(`,"api_key":"k","models":["standard","ultra"]`), []string{`models: "ultra" is not a tier`}},
		{"bad tier in model_ids", gem(`,"api_key":"k","model_ids":{"turbo":"x"}`), []string{`model_ids: "turbo" is not a tier`}},
		{"base_url without scheme", gem(`,"api_key":"k","base_url":"proxy.example.com"`), []string{"base_url: want an http(s) URL"}},
		{"base_url of another scheme", gem(`,"api_key":"k","base_url":"ftp://proxy.example.com"`), []string{"base_url: want an http(s) URL"}},
		{"base_url without host", gem(`,"api_key":"k","base_url":"http://"`), []string{"base_url: want an http(s) URL"}},
		{"base_url unparsable", gem(`,"api_key":"k","base_url":"http://[::1"`), []string{"base_url: want an http(s) URL"}},
		{"negative weight", gem(`,"api_key":"k","weight":-1`), []string{"weight: want 1 to 1000"}},
		{"weight too large", gem(`,"api_key":"k","weight":1001`), []string{"weight: want 1 to 1000"}},
		{"negative rpm", gem(`,"api_key":"k","rpm":-1`), []string{"rpm and concurrency"}},
		{"negative concurrency", gem(`,"api_key":"k","concurrency":-5`), []string{"rpm and concurrency"}},
		{"vertex without project", vtx(`,"location":"us-central1"`), []string{"upstreams[0] (v)", "a vertex upstream needs project and location"}},
		{"vertex without location", vtx(`,"project":"p"`), []string{"a vertex upstream needs project and location"}},
		{"vertex credentials_file missing", vtx(`,"project":"p","location":"l","credentials_file":"/nonexistent/sa.json"`), []string{"credentials_file:", "/nonexistent/sa.json"}},
		{"vertex credentials_env unset", vtx(`,"project":"p","location":"l","credentials_env":"UNSET_VAR"`), []string{"credentials_env: the variable UNSET_VAR is empty or unset"}},
		{"vertex both credentials", vtx(`,"project":"p","location":"l","credentials_file":"/x","credentials_env":"SET"`), []string{"not both"}},
		{"breaker failures negative", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"failures":-1}}`, []string{"breaker: want failures >= 1"}},
		{"breaker cooldown below 1s", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"cooldown":"500ms"}}`, []string{"breaker:", "cooldown and throttle >= 1s"}},
		{"breaker negative cooldown", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"cooldown":"-5s"}}`, []string{"breaker:"}},
		{"breaker throttle below 1s", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"throttle":0.5}}`, []string{"breaker:"}},
		{"breaker max_throttle below throttle", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"throttle":"20s","max_throttle":"10s"}}`, []string{"max_throttle >= throttle"}},
		{"breaker duration not a duration", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"cooldown":"soon"}}`, []string{`want a duration like "10s"`}},
		{"breaker duration of another type", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}],"breaker":{"cooldown":true}}`, []string{`want a duration like "10s"`}},
		{"every bad upstream is named", `{"upstreams":[{"name":"ok","provider":"gemini","api_key":"k"},{"name":"a","provider":"gemini"},{"name":"b","provider":"vertex"}]}`,
			[]string{"upstreams[1] (a)", "upstreams[2] (b)", "needs api_key", "needs project and location"}},
		// A second JSON value after the file's object is not the file the
		// operator meant: refused, not silently ignored.
		{"trailing content", `{"upstreams":[{"name":"u","provider":"gemini","api_key":"k"}]} {"upstreams":[]}`, []string{"upstreams file:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.file), getenv)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", p)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q; want it to say %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "upstreams.json")
	if err := os.WriteFile(path, []byte(`{"upstreams":[{"name":"a","provider":"gemini","api_key_env":"K"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path, env(map[string]string{"K": "key"}))
	if err != nil || p.Upstreams[0].APIKey != "key" {
		t.Fatalf("Load: %+v, %v", p, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json"), env(nil)); err == nil || !strings.Contains(err.Error(), "upstreams file:") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := Load(path, env(nil)); err == nil || !strings.Contains(err.Error(), "K is empty or unset") {
		t.Errorf("an unset variable: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := Upstream{Name: "a", Provider: Gemini, APIKey: "k1", BaseURL: "https://x.example.com", Weight: 1}
	fp := base.Fingerprint()
	if len(fp) != 16 {
		t.Errorf("fingerprint %q: want 16 hex digits", fp)
	}
	if base.Fingerprint() != fp {
		t.Error("the fingerprint is not stable")
	}
	same := []func(u *Upstream){
		func(u *Upstream) { u.Weight = 7 },
		func(u *Upstream) { u.Models = []string{"pro"} },
		func(u *Upstream) { u.RPM, u.Concurrency = 5, 5 },
		func(u *Upstream) { u.APIKeyEnv = "OTHER" }, // where the key comes from is not the key
	}
	for i, f := range same {
		u := base
		f(&u)
		if u.Fingerprint() != fp {
			t.Errorf("change %d (not the credential) changed the fingerprint", i)
		}
	}
	differ := map[string]func(u *Upstream){
		"api_key":          func(u *Upstream) { u.APIKey = "k2" },
		"base_url":         func(u *Upstream) { u.BaseURL = "https://y.example.com" },
		"provider":         func(u *Upstream) { u.Provider = Vertex },
		"project":          func(u *Upstream) { u.Project = "p" },
		"location":         func(u *Upstream) { u.Location = "l" },
		"credentials_file": func(u *Upstream) { u.CredentialsFile = "/sa.json" },
	}
	for name, f := range differ {
		u := base
		f(&u)
		if u.Fingerprint() == fp {
			t.Errorf("a new %s kept the fingerprint", name)
		}
	}
	// Fields never run into each other.
	a := Upstream{Provider: Gemini, APIKey: "ab", BaseURL: "c"}
	b := Upstream{Provider: Gemini, APIKey: "a", BaseURL: "bc"}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("two credentials share a fingerprint")
	}
}

func TestPublicHidesTheSecret(t *testing.T) {
	t.Parallel()
	u := Upstream{Name: "main", Provider: Gemini, APIKey: "AIzaSECRETSECRET", APIKeyEnv: "KEY_ENV", BaseURL: "https://proxy.example.com:8443/v1",
		Weight: 3, Models: []string{"standard"}, RPM: 60, Concurrency: 4}
	p := u.Public()
	j, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(j), "SECRET") {
		t.Errorf("Public shows the key: %s", j)
	}
	if p.Name != "main" || p.Host != "proxy.example.com:8443" || p.Weight != 3 || p.RPM != 60 || p.Concurrency != 4 || p.Credential != u.Fingerprint() {
		t.Errorf("public %+v", p)
	}
	v := Upstream{Name: "gcp", Provider: Vertex, Project: "p", Location: "l", CredentialsFile: "/secrets/sa.json", Weight: 1}.Public()
	if v.Host != "" || v.Project != "p" || v.Location != "l" {
		t.Errorf("vertex public %+v", v)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Breaker{Failures: 2, Cooldown: Duration(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	var back Breaker
	if err := json.Unmarshal(b, &back); err != nil || back.Cooldown != Duration(1500*time.Millisecond) || back.Failures != 2 {
		t.Errorf("round trip %s: %+v, %v", b, back, err)
	}
}
