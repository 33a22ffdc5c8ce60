package e2e

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Tracing in docker-compose.yml: off by default (every service's
// OTEL_EXPORTER_OTLP_ENDPOINT empty), on when the variable is set, and a
// Jaeger behind the tracing profile, at a pinned tag, its UI on loopback,
// receiving OTLP/HTTP where the documented endpoint points.
func TestDeployComposeTracing(t *testing.T) {
	secret := strings.Repeat("s", 32)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		profiles []string
		endpoint string // every service's OTEL_EXPORTER_OTLP_ENDPOINT
		jaeger   bool
	}{
		{name: "default", env: map[string]string{}, endpoint: ""},
		{name: "tracing profile", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}, profiles: []string{"tracing"}, endpoint: "http://jaeger:4318", jaeger: true},
		{name: "an endpoint of one's own", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo:4318"}, endpoint: "http://tempo:4318"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["EASEL_SIGNING_SECRET"] = secret
			p, err := loadCompose(t, tc.env, tc.profiles...)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"gateway", "worker"} {
				s, err := p.GetService(name)
				if err != nil {
					t.Fatal(err)
				}
				v, ok := s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]
				if !ok || v == nil || *v != tc.endpoint {
					t.Errorf("%s OTEL_EXPORTER_OTLP_ENDPOINT %v; want %q", name, v, tc.endpoint)
				}
			}
			if _, on := p.Services["jaeger"]; on != tc.jaeger {
				t.Errorf("jaeger runs: %v; want %v (behind the tracing profile)", on, tc.jaeger)
			}
			if !tc.jaeger {
				if _, ok := p.DisabledServices["jaeger"]; !ok {
					t.Error("no jaeger service behind a profile")
				}
				return
			}
			j, _ := p.GetService("jaeger")
			if !slices.Contains(j.Profiles, "tracing") {
				t.Errorf("jaeger profiles %v", j.Profiles)
			}
			if !regexp.MustCompile(`^jaegertracing/jaeger:2\.\d+\.\d+$`).MatchString(j.Image) {
				t.Errorf("jaeger image %q; want jaegertracing/jaeger at a pinned 2.x.y tag", j.Image)
			}
			if len(j.Ports) != 1 || j.Ports[0].Target != 16686 || j.Ports[0].HostIP != "127.0.0.1" {
				t.Errorf("jaeger ports %+v; want its UI, 16686, on 127.0.0.1 only", j.Ports)
			}
		})
	}
}
