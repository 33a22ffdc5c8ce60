// Package createreq decodes and validates the body of POST /v1/task/create.
//
// Every failure is an *apperr.Error with a message that names the field at
// fault: Invalid (400), TooLarge (413) or UnsupportedMediaType (415).
package createreq

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
	"github.com/easelhq/easel/pkg/task"
	"github.com/easelhq/easel/pkg/upload"
)

// Limits.
const (
	MaxBodyBytes   = 64 << 10
	MaxPromptChars = 10_000
	MaxImageURLs   = 10
	MaxURLLen      = 2048
)

// Decoder decodes create requests for one catalog.
type Decoder struct {
	Catalog *catalog.Catalog
	// Egress refuses source URLs whose host is a literal address in a
	// refused range.
	Egress egress.Policy
	// Uploads, when set, tells the URLs of images uploaded to this
	// service (upload.FromURL): by path and signature, whatever their
	// host, they skip the address rules (the workers read them from the
	// blob store), and one whose signature is wrong or has expired is
	// refused. Now is the time their expiry is checked at (nil: the
	// clock).
	Uploads upload.Checker
	Now     func() time.Time
}

// wire is the JSON shape. Pointers tell a missing (or null) field from an
// empty one.
type wire struct {
	Model    *string    `json:"model"`
	TaskType *string    `json:"task_type"`
	Input    *wireInput `json:"input"`
	// CallbackURL is where the task's webhooks go; CallBackURL is the same
	// field as kie.ai's clients spell it.
	CallbackURL    *string   `json:"callback_url"`
	CallBackURL    *string   `json:"callBackUrl"`
	CallbackEvents *[]string `json:"callback_events"`
}

type wireInput struct {
	Prompt        *promptText  `json:"prompt"`
	AspectRatio   *string      `json:"aspect_ratio"`
	ImageSize     *string      `json:"image_size"`
	ImageURLs     *[]string    `json:"image_urls"`
	OutputFormat  *string      `json:"output_format"`
	OutputQuality *wholeNumber `json:"output_quality"`
	NumImages     *wholeNumber `json:"num_images"`
}

func invalid(format string, args ...any) error {
	return apperr.Errorf(apperr.Invalid, format, args...)
}

// CheckContentType accepts application/json, with an optional utf-8 charset.
func CheckContentType(contentType string) error {
	if contentType == "" {
		return apperr.New(apperr.UnsupportedMediaType, "Content-Type must be application/json")
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return apperr.New(apperr.UnsupportedMediaType, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return apperr.New(apperr.UnsupportedMediaType, "Content-Type charset must be utf-8")
	}
	return nil
}

// ReadBody reads body, which must be at most MaxBodyBytes (else
// apperr.TooLarge). contentLength is the request's declared length (-1 when
// unknown), checked first so an oversized body is refused unread.
func ReadBody(body io.Reader, contentLength int64) ([]byte, error) {
	if contentLength > MaxBodyBytes {
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(body, MaxBodyBytes+1))
	if err != nil {
		return nil, apperr.Wrap(err, apperr.Invalid, "could not read the request body")
	}
	if len(b) > MaxBodyBytes {
		return nil, tooLarge()
	}
	return b, nil
}

func tooLarge() error {
	return apperr.Errorf(apperr.TooLarge, "request body is larger than the %d KiB limit", MaxBodyBytes>>10)
}

// Decode parses and validates a JSON body. The input it returns has its
// defaults applied (task.Input.WithDefaults): the prompt is trimmed, the
// image size set, and the aspect ratio set unless an edit leaves it to its
// first source image.
func (d *Decoder) Decode(body []byte) (task.Input, error) {
	var w wire
	if len(strings.TrimSpace(string(body))) == 0 {
		return task.Input{}, invalid("request body is empty: send a JSON object with model, task_type and input")
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return task.Input{}, jsonError(err)
	}
	in, err := d.validate(&w)
	if err != nil {
		return task.Input{}, err
	}
	return in.WithDefaults(), nil
}

// jsonError turns an encoding/json error into a client message.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		return invalid("%s", fe.msg)
	case errors.As(err, &se):
		return invalid("request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("request body must be a JSON object")
		}
		if want, ok := fieldTypes[te.Field]; ok {
			return invalid("%s must be %s", te.Field, want)
		}
		return invalid("%s has the wrong type", te.Field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body is not valid JSON: unexpected end of input")
	}
	return invalid("request body is not valid JSON")
}

// fieldTypes names the JSON type of each known field, for type errors.
var fieldTypes = map[string]string{
	"model":                "a string",
	"task_type":            "a string",
	"input":                "an object",
	"input.prompt":         "a string",
	"input.aspect_ratio":   "a string",
	"input.image_size":     "a string",
	"input.image_urls":     "an array of strings",
	"input.output_format":  "a string",
	"input.output_quality": "an integer",
	"input.num_images":     "an integer",
	"callback_url":         "a string",
	"callBackUrl":          "a string",
	"callback_events":      "an array of strings",
}

func (d *Decoder) validate(w *wire) (task.Input, error) {
	var r task.Input
	switch {
	case w.Model == nil || *w.Model == "":
		return r, invalid("model is required; supported models: %s", d.Catalog.IDs())
	default:
		m, ok := d.Catalog.Lookup(*w.Model)
		if !ok {
			return r, invalid("model %q is not supported; supported models: %s", clip(*w.Model), d.Catalog.IDs())
		}
		r.Model = m
	}
	switch {
	case w.TaskType == nil || *w.TaskType == "":
		return r, invalid(`task_type is required; use "image"`)
	case *w.TaskType != task.Type:
		return r, invalid(`task_type %q is not supported; use "image"`, clip(*w.TaskType))
	}
	if w.Input == nil {
		return r, invalid("input is required: an object with at least a prompt")
	}
	in := w.Input

	if in.Prompt == nil {
		return r, invalid("input.prompt is required")
	}
	r.Prompt = strings.TrimSpace(string(*in.Prompt))
	if r.Prompt == "" {
		return r, invalid("input.prompt must not be blank")
	}
	if n := utf8.RuneCountInString(r.Prompt); n > MaxPromptChars {
		return r, invalid("input.prompt is %d characters long; the limit is %d", n, MaxPromptChars)
	}

	if in.AspectRatio != nil && *in.AspectRatio != "" {
		if !catalog.ValidAspectRatio(*in.AspectRatio) {
			return r, invalid("input.aspect_ratio %q is not supported; use one of %s", clip(*in.AspectRatio), strings.Join(catalog.AspectRatios, ", "))
		}
		r.AspectRatio = *in.AspectRatio
	}

	if in.ImageSize != nil && *in.ImageSize != "" {
		if !r.Model.SupportsImageSize() {
			pro, _ := d.Catalog.ByTier(catalog.Pro)
			return r, invalid("input.image_size is not supported by model %s; omit it, or use %s", r.Model.ID, pro.ID)
		}
		if !catalog.ValidImageSize(*in.ImageSize) {
			return r, invalid("input.image_size %q is not supported; use 1K, 2K or 4K (uppercase)", clip(*in.ImageSize))
		}
		r.ImageSize = *in.ImageSize
	}

	if in.ImageURLs != nil {
		urls := *in.ImageURLs
		switch {
		case len(urls) == 0:
			return r, invalid("input.image_urls must hold 1 to %d URLs; omit it for text-to-image", MaxImageURLs)
		case len(urls) > MaxImageURLs:
			return r, invalid("input.image_urls has %d URLs; the limit is %d", len(urls), MaxImageURLs)
		}
		for i, s := range urls {
			if err := d.checkURL(i, s); err != nil {
				return r, err
			}
		}
		r.ImageURLs = urls
	}

	if err := output(in, &r); err != nil {
		return r, err
	}

	cb, err := d.callback(w)
	if err != nil {
		return r, err
	}
	r.Callback = cb
	return r, nil
}

// output validates what is made: output_format (default png),
// output_quality (1 to 100, default task.DefaultQuality for a lossy
// format) and num_images (1 to task.MaxImages, default 1).
func output(in *wireInput, r *task.Input) error {
	if in.OutputFormat != nil && *in.OutputFormat != "" {
		if !slices.Contains(task.Formats, *in.OutputFormat) {
			return invalid("input.output_format %q is not supported; use one of %s (lowercase)", clip(*in.OutputFormat), strings.Join(task.Formats, ", "))
		}
		r.OutputFormat = *in.OutputFormat
	}
	if in.OutputQuality != nil {
		q, ok := integer(*in.OutputQuality)
		if !ok || q < task.MinQuality || q > task.MaxQuality {
			return invalid("input.output_quality must be an integer from %d to %d", task.MinQuality, task.MaxQuality)
		}
		// Only jpeg and webp encodings take a quality (webp at 100 is
		// lossless); png is accepted with one and ignores it.
		if task.Lossy(r.OutputFormat) {
			r.OutputQuality = q
		}
	}
	if in.NumImages != nil {
		n, ok := integer(*in.NumImages)
		if !ok || n < 1 || n > task.MaxImages {
			return invalid("input.num_images must be an integer from 1 to %d", task.MaxImages)
		}
		r.NumImages = n
	}
	return nil
}

// wholeNumber is a field's JSON value as sent, read as a whole number
// when validated (integer): 2.5, 1e2, "2" or true is refused by the
// field's name, never rounded or converted.
type wholeNumber struct{ raw []byte }

// UnmarshalJSON keeps the value for integer.
func (w *wholeNumber) UnmarshalJSON(b []byte) error {
	w.raw = append(w.raw[:0], b...)
	return nil
}

// integer reads a JSON integer literal of int32's range.
func integer(w wholeNumber) (int, bool) {
	v, err := strconv.ParseInt(string(w.raw), 10, 32)
	if err != nil {
		return 0, false
	}
	return int(v), true
}

// callback validates the webhook fields: callback_url (or callBackUrl),
// with the address rules of image_urls, and callback_events (default:
// task.DefaultEvents), which needs a callback_url.
func (d *Decoder) callback(w *wire) (task.Callback, error) {
	var cb task.Callback
	name := "callback_url"
	switch a, b := deref(w.CallbackURL), deref(w.CallBackURL); {
	case a != "" && b != "" && a != b:
		return cb, invalid("callback_url and callBackUrl are two spellings of one field and differ; send one")
	case a != "":
		cb.URL = a
	case b != "":
		cb.URL, name = b, "callBackUrl"
	}
	if w.CallbackEvents != nil {
		evs := *w.CallbackEvents
		switch {
		case cb.URL == "":
			return cb, invalid("callback_events needs a callback_url")
		case len(evs) == 0:
			return cb, invalid("callback_events must name at least one event (%s); omit it for the default, %s", strings.Join(task.Events, ", "), strings.Join(task.DefaultEvents, ", "))
		}
		for i, ev := range evs {
			if !slices.Contains(task.Events, ev) {
				return cb, invalid("callback_events[%d] %q is not an event; use %s", i, clip(ev), strings.Join(task.Events, ", "))
			}
			if slices.Contains(evs[:i], ev) {
				return cb, invalid("callback_events lists %q twice", ev)
			}
		}
		cb.Events = slices.Clone(evs)
	}
	if cb.URL == "" {
		return task.Callback{}, nil
	}
	if len(cb.URL) > MaxURLLen {
		return cb, invalid("%s is longer than %d characters", name, MaxURLLen)
	}
	u, err := url.Parse(cb.URL)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return cb, invalid("%s must be an absolute http or https URL", name)
	}
	if why := d.Egress.CheckURL(u); why != "" {
		return cb, invalid("%s %s", name, why)
	}
	if cb.Events == nil {
		cb.Events = slices.Clone(task.DefaultEvents)
	}
	return cb, nil
}

// Endpoint validates an account's default webhook endpoint, a JSON
// object {"callback_url", "callback_events"}, by the rules of a create's
// fields of those names (callback_events default: task.DefaultEvents); the
// URL is required.
func (d *Decoder) Endpoint(body []byte) (task.Callback, error) {
	var w struct {
		CallbackURL    *string   `json:"callback_url"`
		CallbackEvents *[]string `json:"callback_events"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return task.Callback{}, invalid(`the body must be a JSON object: {"callback_url": "https://...", "callback_events": [...]}`)
	}
	if deref(w.CallbackURL) == "" {
		return task.Callback{}, invalid("callback_url is required")
	}
	return d.callback(&wire{CallbackURL: w.CallbackURL, CallbackEvents: w.CallbackEvents})
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (d *Decoder) checkURL(i int, s string) error {
	if len(s) > MaxURLLen {
		return invalid("input.image_urls[%d] is longer than %d characters", i, MaxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return invalid("input.image_urls[%d] must be an absolute http or https URL", i)
	}
	if d.Uploads != nil {
		now := time.Now()
		if d.Now != nil {
			now = d.Now()
		}
		if _, ok, err := upload.FromURL(d.Uploads, s, now); ok {
			if err != nil {
				return invalid("input.image_urls[%d] %s", i, apperr.MessageOf(err))
			}
			return nil
		}
	}
	if why := d.Egress.CheckURL(u); why != "" {
		return invalid("input.image_urls[%d] %s", i, why)
	}
	return nil
}

// clip shortens a client-supplied value echoed in a message.
func clip(s string) string {
	const max = 64
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return fmt.Sprintf("%s...", string(r[:max]))
}
