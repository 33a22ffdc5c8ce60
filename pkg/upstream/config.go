// Package upstream is what every worker and the operators' tools share
// about the pool of upstream credentials (EASEL_UPSTREAMS_FILE): the
// file's format and its checks, the circuit breaker each upstream has in
// Redis (shared by every worker), and the state operators read (calls a
// minute, recent errors, a disabled credential).
package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/easelhq/easel/pkg/catalog"
)

// Providers.
const (
	Gemini = "gemini" // the Gemini API, with an API key
	Vertex = "vertex" // Vertex AI, with a Google Cloud project and credentials
)

// File is the pool's file:
//
//	{"upstreams": [{"name": "main", "provider": "gemini", "api_key_env": "GEMINI_KEY_MAIN", "weight": 3}, ...],
//	 "breaker": {"failures": 5, "cooldown": "10s"}}
type File struct {
	Upstreams []Upstream `json:"upstreams"`
	Breaker   Breaker    `json:"breaker"`
}

// Upstream is one credential of the pool.
type Upstream struct {
	// Name identifies it in logs, metrics and Redis: letters, digits, '-',
	// '_' and '.', at most 64.
	Name     string `json:"name"`
	Provider string `json:"provider"`
	// APIKey (gemini), or APIKeyEnv: the environment variable holding it
	// (so the key can stay in a Kubernetes Secret).
	APIKey    string `json:"api_key,omitempty"`
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// BaseURL overrides the provider's address (a proxy; tests' fakes).
	BaseURL string `json:"base_url,omitempty"`
	// Project and Location (vertex), and the service account's JSON
	// (CredentialsFile, or CredentialsEnv naming a variable holding its
	// path); neither: the environment's default credentials.
	Project         string `json:"project,omitempty"`
	Location        string `json:"location,omitempty"`
	CredentialsFile string `json:"credentials_file,omitempty"`
	CredentialsEnv  string `json:"credentials_env,omitempty"`
	// Weight: its share of the calls among the healthy upstreams of a
	// model (1 when 0).
	Weight int `json:"weight,omitempty"`
	// Models: the tiers it serves ("standard", "pro"); empty: both.
	Models []string `json:"models,omitempty"`
	// RPM and Concurrency: its quota, shared by every worker (0: none).
	RPM         int `json:"rpm,omitempty"`
	Concurrency int `json:"concurrency,omitempty"`
	// ModelIDs maps tiers to the provider's model ids (missing: the
	// deployment's EASEL_GEMINI_MODELS).
	ModelIDs map[string]string `json:"model_ids,omitempty"`

	// credSum is the hash of the credentials file's content (vertex), so
	// that a key rotated in place is a new credential.
	credSum string
}

// Breaker tunes every upstream's circuit breaker.
type Breaker struct {
	// Failures: this many failed calls in a row (5xx, timeouts, connection
	// errors) open it.
	Failures int `json:"failures,omitempty"`
	// Cooldown: how long it stays open before one probe call may try.
	Cooldown Duration `json:"cooldown,omitempty"`
	// Throttle: how long a 429 cools the upstream at first (doubling on
	// each 429 in a row, up to MaxThrottle).
	Throttle    Duration `json:"throttle,omitempty"`
	MaxThrottle Duration `json:"max_throttle,omitempty"`
}

// DefaultBreaker is the breaker's settings when the file sets none.
var DefaultBreaker = Breaker{Failures: 5, Cooldown: Duration(10 * time.Second), Throttle: Duration(10 * time.Second), MaxThrottle: Duration(5 * time.Minute)}

// Duration is a time.Duration written "10s" in JSON.
type Duration time.Duration

// UnmarshalJSON reads "10s" (or a number of seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n float64
		if err := json.Unmarshal(b, &n); err != nil {
			return errors.New(`want a duration like "10s"`)
		}
		*d = Duration(n * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration like \"10s\": %w", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "10s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

var validName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Pool is a checked file: its upstreams with their secrets read, and a
// fingerprint of each.
type Pool struct {
	Upstreams []Upstream
	Breaker   Breaker
}

// Parse reads and checks a file's content; getenv reads the variables
// it names.
func Parse(data []byte, getenv func(string) string) (*Pool, error) {
	var f File
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("upstreams file: %w", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return nil, errors.New("upstreams file: content after the JSON object")
	}
	if len(f.Upstreams) == 0 {
		return nil, errors.New("upstreams file: no upstreams")
	}
	p := &Pool{Breaker: f.Breaker.withDefaults()}
	if p.Breaker.Failures < 1 || p.Breaker.Cooldown < Duration(time.Second) || p.Breaker.Throttle < Duration(time.Second) || p.Breaker.MaxThrottle < p.Breaker.Throttle {
		return nil, errors.New("upstreams file: breaker: want failures >= 1, cooldown and throttle >= 1s, max_throttle >= throttle")
	}
	var errs []error
	seen := map[string]bool{}
	for i, u := range f.Upstreams {
		at := fmt.Sprintf("upstreams[%d]", i)
		if u.Name != "" {
			at += " (" + u.Name + ")"
		}
		u, err := u.check(getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", at, err))
			continue
		}
		if seen[u.Name] {
			errs = append(errs, fmt.Errorf("%s: the name is used twice", at))
		}
		seen[u.Name] = true
		p.Upstreams = append(p.Upstreams, u)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("upstreams file: %w", errors.Join(errs...))
	}
	return p, nil
}

// Load reads and checks the file at path.
func Load(path string, getenv func(string) string) (*Pool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("upstreams file: %w", err)
	}
	return Parse(data, getenv)
}

func (b Breaker) withDefaults() Breaker {
	if b.Failures == 0 {
		b.Failures = DefaultBreaker.Failures
	}
	if b.Cooldown == 0 {
		b.Cooldown = DefaultBreaker.Cooldown
	}
	if b.Throttle == 0 {
		b.Throttle = DefaultBreaker.Throttle
	}
	if b.MaxThrottle == 0 {
		b.MaxThrottle = max(DefaultBreaker.MaxThrottle, b.Throttle)
	}
	return b
}

func (u Upstream) check(getenv func(string) string) (Upstream, error) {
	if !validName.MatchString(u.Name) {
		return u, errors.New("name: want 1 to 64 letters, digits, '-', '_' or '.'")
	}
	if u.Weight < 0 || u.Weight > 1000 {
		return u, errors.New("weight: want 1 to 1000 (0: 1)")
	}
	if u.Weight == 0 {
		u.Weight = 1
	}
	if u.RPM < 0 || u.Concurrency < 0 {
		return u, errors.New("rpm and concurrency: want 0 (no limit) or more")
	}
	for _, m := range u.Models {
		if m != string(catalog.Standard) && m != string(catalog.Pro) {
			return u, fmt.Errorf("models: %q is not a tier: want standard or pro", m)
		}
	}
	for t := range u.ModelIDs {
		if t != string(catalog.Standard) && t != string(catalog.Pro) {
			return u, fmt.Errorf("model_ids: %q is not a tier: want standard or pro", t)
		}
	}
	if u.BaseURL != "" {
		if v, err := url.Parse(u.BaseURL); err != nil || (v.Scheme != "http" && v.Scheme != "https") || v.Host == "" {
			return u, errors.New("base_url: want an http(s) URL")
		}
	}
	switch u.Provider {
	case Gemini:
		if u.APIKey != "" && u.APIKeyEnv != "" {
			return u, errors.New("give api_key or api_key_env, not both")
		}
		if u.APIKeyEnv != "" {
			if u.APIKey = getenv(u.APIKeyEnv); u.APIKey == "" {
				return u, fmt.Errorf("api_key_env: the variable %s is empty or unset", u.APIKeyEnv)
			}
		}
		if u.APIKey == "" {
			return u, errors.New("a gemini upstream needs api_key or api_key_env")
		}
	case Vertex:
		if u.Project == "" || u.Location == "" {
			return u, errors.New("a vertex upstream needs project and location")
		}
		if u.CredentialsFile != "" && u.CredentialsEnv != "" {
			return u, errors.New("give credentials_file or credentials_env, not both")
		}
		if u.CredentialsEnv != "" {
			if u.CredentialsFile = getenv(u.CredentialsEnv); u.CredentialsFile == "" {
				return u, fmt.Errorf("credentials_env: the variable %s is empty or unset", u.CredentialsEnv)
			}
		}
		if u.CredentialsFile != "" {
			b, err := os.ReadFile(u.CredentialsFile)
			if err != nil {
				return u, fmt.Errorf("credentials_file: %w", err)
			}
			sum := sha256.Sum256(b)
			u.credSum = hex.EncodeToString(sum[:])
		}
	default:
		return u, fmt.Errorf("provider %q: want gemini or vertex", u.Provider)
	}
	return u, nil
}

// Serves reports whether the upstream serves tier t.
func (u Upstream) Serves(t catalog.Tier) bool {
	return len(u.Models) == 0 || slices.Contains(u.Models, string(t))
}

// Fingerprint identifies what the upstream is: its provider, address and
// credential (a credentials file's content, not only its path). An upstream disabled for a refused credential stays disabled
// until its fingerprint changes (a new key in the file).
func (u Upstream) Fingerprint() string {
	sum := sha256.Sum256([]byte(strings.Join([]string{u.Provider, u.APIKey, u.BaseURL, u.Project, u.Location, u.CredentialsFile, u.credSum}, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// QuotaKey is an upstream's name in the shared quota (package quota).
func QuotaKey(name string) string { return "upstream:" + name }

// Public is what operators may see of an upstream: never its credential.
type Public struct {
	Name        string   `json:"name"`
	Provider    string   `json:"provider"`
	Host        string   `json:"host,omitempty"`
	Project     string   `json:"project,omitempty"`
	Location    string   `json:"location,omitempty"`
	Weight      int      `json:"weight"`
	Models      []string `json:"models,omitempty"`
	RPM         int      `json:"rpm,omitempty"`
	Concurrency int      `json:"concurrency,omitempty"`
	// Credential identifies the credential (Fingerprint), not the secret.
	Credential string `json:"credential"`
}

// Public returns what operators may see of u.
func (u Upstream) Public() Public {
	p := Public{Name: u.Name, Provider: u.Provider, Project: u.Project, Location: u.Location, Weight: u.Weight,
		Models: u.Models, RPM: u.RPM, Concurrency: u.Concurrency, Credential: u.Fingerprint()}
	if v, err := url.Parse(u.BaseURL); err == nil {
		p.Host = v.Host
	}
	return p
}

// CredentialFiles are the credentials files the pool's upstreams read: a
// change of one is a change of the pool (a key rotated in place).
func (p *Pool) CredentialFiles() []string {
	var out []string
	for _, u := range p.Upstreams {
		if u.CredentialsFile != "" {
			out = append(out, u.CredentialsFile)
		}
	}
	return out
}
