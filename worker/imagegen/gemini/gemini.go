// Package gemini generates images with Google's Gemini image models through
// the official Go SDK (google.golang.org/genai).
//
// Errors come back classified (see package apperr): 429, 5xx, timeouts and
// connection failures are retryable (UpstreamUnavailable); a response held
// back by the provider's safety filter is ContentBlocked; anything else the
// model refuses is GenerationFailed. Messages never carry the provider's raw
// reply: that goes to the cause, for the logs.
package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/auth"
	"cloud.google.com/go/auth/credentials"
	"google.golang.org/genai"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/tracing"
	"github.com/easelhq/easel/worker/imagegen"
)

// DefaultModels maps Easel's tiers to Gemini model ids.
var DefaultModels = map[catalog.Tier]string{
	catalog.Standard: "gemini-2.5-flash-image",
	catalog.Pro:      "gemini-3-pro-image-preview",
}

// Config configures the generator.
type Config struct {
	// APIKey: the Gemini API's key. Or, for Vertex AI, Project and
	// Location, with the service account's JSON in CredentialsFile (empty:
	// the environment's default credentials).
	APIKey          string
	Vertex          bool
	Project         string
	Location        string
	CredentialsFile string
	// BaseURL overrides the API's address (tests point it at a fake).
	BaseURL string
	// Models maps tiers to upstream model ids; missing tiers take
	// DefaultModels.
	Models map[catalog.Tier]string
	// Timeout bounds one call; the task's deadline bounds it too.
	Timeout time.Duration
	// HTTPClient, if set, carries the calls. With tracing on, its
	// transport is wrapped in the tracing one.
	HTTPClient *http.Client
	// Tracing, when on, makes a client span of each HTTP request, under
	// the caller's span (the pool's "upstream.call"); nil: off.
	Tracing *tracing.Tracing
	// Expected is how long a call usually takes, per tier, to pace the
	// progress reported while waiting. Missing tiers take 10 s (standard)
	// and 25 s (pro).
	Expected map[catalog.Tier]time.Duration
}

// Generator calls Gemini.
type Generator struct {
	client   *genai.Client
	models   map[catalog.Tier]string
	expected map[catalog.Tier]time.Duration
}

// New returns a generator.
func New(ctx context.Context, cfg Config) (*Generator, error) {
	opts := genai.HTTPOptions{BaseURL: cfg.BaseURL}
	if cfg.Timeout > 0 {
		opts.Timeout = &cfg.Timeout
	}
	// Retries are the worker's (bounded, with backoff, for every
	// generator); the SDK makes one attempt per call.
	cc := &genai.ClientConfig{
		APIKey:      cfg.APIKey,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  cfg.HTTPClient,
		HTTPOptions: opts,
	}
	if cfg.Vertex {
		if cfg.Project == "" || cfg.Location == "" {
			return nil, errors.New("gemini: Vertex AI needs a project and a location")
		}
		cc.APIKey, cc.Backend, cc.Project, cc.Location = "", genai.BackendVertexAI, cfg.Project, cfg.Location
		if cfg.CredentialsFile != "" {
			// A service account's key only: a credential file of another
			// type is refused, not trusted.
			creds, err := credentials.NewCredentialsFromFile(credentials.ServiceAccount, cfg.CredentialsFile,
				&credentials.DetectOptions{Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}})
			if err != nil {
				return nil, fmt.Errorf("gemini: Vertex AI credentials: %w", err)
			}
			cc.Credentials = creds
		}
	} else if cfg.APIKey == "" {
		return nil, errors.New("gemini: an API key is required")
	}
	client, err := genai.NewClient(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	if cfg.Tracing != nil && cfg.Tracing.Enabled() {
		// The client the SDK made (an authenticating one for Vertex AI)
		// or was given: its requests nest under the caller's span.
		if hc := client.ClientConfig().HTTPClient; hc != nil {
			hc.Transport = tracing.ChildTransport(hc.Transport, cfg.Tracing)
		}
	}
	g := &Generator{
		client:   client,
		models:   map[catalog.Tier]string{},
		expected: map[catalog.Tier]time.Duration{catalog.Standard: 10 * time.Second, catalog.Pro: 25 * time.Second},
	}
	for t, m := range DefaultModels {
		g.models[t] = m
	}
	for t, m := range cfg.Models {
		g.models[t] = m
	}
	for t, d := range cfg.Expected {
		g.expected[t] = d
	}
	return g, nil
}

// Generate asks the model for images. progress rises while the call runs,
// paced by the tier's expected duration, and never reaches 100.
func (g *Generator) Generate(ctx context.Context, req imagegen.Request, progress func(pct int)) ([]imagegen.Image, error) {
	model, ok := g.models[req.Model.Tier]
	if !ok {
		return nil, apperr.Errorf(task.GenerationFailed, "model %s is not configured", req.Model.ID)
	}
	parts := []*genai.Part{genai.NewPartFromText(req.Prompt)}
	for _, s := range req.Sources {
		parts = append(parts, genai.NewPartFromBytes(s.Data, s.MIME))
	}
	config := &genai.GenerateContentConfig{
		ResponseModalities: []string{"TEXT", "IMAGE"},
		ImageConfig:        &genai.ImageConfig{AspectRatio: req.AspectRatio},
		// One request per call: a partial response is an error, not a
		// second billed request.
		AutomaticContinuation: genai.Ptr(false),
	}
	if req.Model.Tier == catalog.Pro {
		config.ImageConfig.ImageSize = req.ImageSize
	}

	stop := g.pace(ctx, req.Model.Tier, progress)
	resp, err := g.client.Models.GenerateContent(ctx, model, []*genai.Content{genai.NewContentFromParts(parts, genai.RoleUser)}, config)
	stop()
	if err != nil {
		return nil, classify(ctx, err)
	}
	return images(resp)
}

// pace reports progress on a curve that approaches 95% of the way as the
// expected duration passes, until stop is called.
func (g *Generator) pace(ctx context.Context, tier catalog.Tier, progress func(int)) (stop func()) {
	expected := g.expected[tier]
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		last := 0
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				pct := int(95 * (1 - math.Exp(-2*now.Sub(start).Seconds()/expected.Seconds())))
				if pct > last {
					progress(pct)
					last = pct
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// blocked finish reasons: the provider's safety filters.
var blocked = map[genai.FinishReason]bool{
	genai.FinishReasonSafety:                 true,
	genai.FinishReasonProhibitedContent:      true,
	genai.FinishReasonBlocklist:              true,
	genai.FinishReasonSPII:                   true,
	genai.FinishReasonImageSafety:            true,
	genai.FinishReasonImageProhibitedContent: true,
	genai.FinishReasonRecitation:             true,
	genai.FinishReasonImageRecitation:        true,
}

// images takes every inline image of a response.
func images(resp *genai.GenerateContentResponse) ([]imagegen.Image, error) {
	var out []imagegen.Image
	var reasons []string
	for _, c := range resp.Candidates {
		if c.FinishReason != "" && c.FinishReason != genai.FinishReasonStop {
			reasons = append(reasons, string(c.FinishReason))
		}
		if c.Content == nil {
			continue
		}
		for _, p := range c.Content.Parts {
			if p.InlineData == nil || !strings.HasPrefix(p.InlineData.MIMEType, "image/") || len(p.InlineData.Data) == 0 {
				continue
			}
			cfg, _, err := image.DecodeConfig(bytes.NewReader(p.InlineData.Data))
			if err != nil {
				return nil, apperr.Wrap(fmt.Errorf("%w: %w", imagegen.ErrUpstreamFault, err), task.GenerationFailed, "the model returned an image that could not be read")
			}
			out = append(out, imagegen.Image{Data: p.InlineData.Data, MIME: p.InlineData.MIMEType, Width: cfg.Width, Height: cfg.Height})
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if pf := resp.PromptFeedback; pf != nil && pf.BlockReason != "" {
		return nil, apperr.Errorf(task.ContentBlocked, "the request was blocked by the provider's safety filter (%s); change the prompt or the source images", pf.BlockReason)
	}
	for _, c := range resp.Candidates {
		if blocked[c.FinishReason] {
			return nil, apperr.Errorf(task.ContentBlocked, "the image was blocked by the provider's safety filter (%s); change the prompt or the source images", c.FinishReason)
		}
	}
	msg := "the model returned no image"
	if len(reasons) > 0 {
		msg += " (" + strings.Join(reasons, ", ") + ")"
	}
	return nil, apperr.New(task.GenerationFailed, msg+"; try rephrasing the prompt")
}

// keyRejected reports an invalid API key, which Gemini answers with a 400
// whose details give the reason API_KEY_INVALID.
func keyRejected(e genai.APIError) bool {
	for _, d := range e.Details {
		if r, _ := d["reason"].(string); r == "API_KEY_INVALID" {
			return true
		}
	}
	return false
}

// credentialRefused reports a token endpoint's refusal of the service
// account itself (401, 403; 400 invalid_grant for a key deleted or
// revoked), not of one token request: an assertion outside "a reasonable
// timeframe" is one worker's clock, and must not disable the credential
// for every worker.
func credentialRefused(e *auth.Error) bool {
	switch e.Response.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return true
	case http.StatusBadRequest:
		var body struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(e.Body, &body)
		return body.Error == "invalid_grant" && !strings.Contains(strings.ToLower(body.Description), "timeframe")
	}
	return false
}

// classify turns an SDK error into an application error.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err() // the task's deadline or a shutdown: the processor decides
	}
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.Code == http.StatusTooManyRequests:
			return apperr.Transient(fmt.Errorf("%w: %w", imagegen.ErrThrottled, err), task.UpstreamUnavailable, "the image model is over capacity; try again later")
		case apiErr.Code >= 500, apiErr.Code == http.StatusRequestTimeout:
			return apperr.Transient(err, task.UpstreamUnavailable, "the image model is unavailable; try again later")
		case apiErr.Code == http.StatusUnauthorized, apiErr.Code == http.StatusForbidden, keyRejected(apiErr):
			return apperr.Wrap(fmt.Errorf("%w: %w", imagegen.ErrRefused, err), apperr.Internal, "the image service is misconfigured")
		case apiErr.Code == http.StatusBadRequest && (apiErr.Status == "" || apiErr.Status == "INVALID_ARGUMENT"):
			// The request itself: final wherever it is sent.
			return apperr.Wrap(err, task.GenerationFailed, "the model could not process this request; check the prompt and the source images")
		default:
			// 404 (a model this upstream lacks), FAILED_PRECONDITION (a
			// region it refuses), ...: final for one upstream, not for a
			// pool.
			return apperr.Wrap(fmt.Errorf("%w: %w", imagegen.ErrUpstreamFault, err), task.GenerationFailed, "the model could not process this request; check the prompt and the source images")
		}
	}
	// Vertex AI: the token endpoint refused the service account (a key
	// revoked or deleted).
	var authErr *auth.Error
	if errors.As(err, &authErr) && authErr.Response != nil && credentialRefused(authErr) {
		return apperr.Wrap(fmt.Errorf("%w: %w", imagegen.ErrRefused, err), apperr.Internal, "the image service is misconfigured")
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, context.DeadlineExceeded) {
		return apperr.Transient(err, task.UpstreamUnavailable, "the image model could not be reached; try again later")
	}
	// An answer that is not the API's (a proxy's page, a broken body).
	return apperr.Wrap(fmt.Errorf("%w: %w", imagegen.ErrUpstreamFault, err), apperr.Internal, "the image could not be generated because of an internal error")
}
