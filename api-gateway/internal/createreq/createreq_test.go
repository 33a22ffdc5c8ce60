package createreq

import (
	"strings"
	"testing"

	"github.com/easelhq/easel/pkg/apperr"
	"github.com/easelhq/easel/pkg/catalog"
	"github.com/easelhq/easel/pkg/egress"
)

const (
	std = "lumen-2.5-flash-image"
	pro = "lumen-3-pro-image-preview"
)

func newDecoder(t testing.TB) *Decoder {
	t.Helper()
	cat, err := catalog.New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	return &Decoder{Catalog: cat}
}

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantModel  string
		wantPrompt string
		wantRatio  string
		wantSize   string
		wantURLs   int
	}{
		{"minimal standard", `{"model":"` + std + `","task_type":"image","input":{"prompt":"a cat"}}`, std, "a cat", "1:1", "1K", 0},
		{"minimal pro defaults to 1K", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"a cat"}}`, pro, "a cat", "1:1", "1K", 0},
		{"pro 4K 9:16", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"x","aspect_ratio":"9:16","image_size":"4K"}}`, pro, "x", "9:16", "4K", 0},
		{"prompt is trimmed", `{"model":"` + std + `","task_type":"image","input":{"prompt":"  a cat \n"}}`, std, "a cat", "1:1", "1K", 0},
		{"unknown fields ignored", `{"model":"` + std + `","task_type":"image","extra":1,"input":{"prompt":"p","seed":42,"n":[1]}}`, std, "p", "1:1", "1K", 0},
		{"null optional fields are absent", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":null,"image_size":null,"image_urls":null}}`, std, "p", "1:1", "1K", 0},
		{"empty-string optional fields are absent", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":"","image_size":""}}`, std, "p", "1:1", "1K", 0},
		{"edit leaves ratio to the worker", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["https://example.com/a.png"]}}`, std, "p", "", "1K", 1},
		{"edit with ratio", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","aspect_ratio":"21:9","image_urls":["http://example.com/a.png","https://cdn.example.org/b.jpg?x=1"]}}`, pro, "p", "21:9", "1K", 2},
		{"ten urls", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":[` + repeatURL(10) + `]}}`, std, "p", "", "1K", 10},
		{"prompt of exactly 10000 characters", `{"model":"` + std + `","task_type":"image","input":{"prompt":"` + strings.Repeat("é", MaxPromptChars) + `"}}`, std, strings.Repeat("é", MaxPromptChars), "1:1", "1K", 0},
		{"whitespace around the body", "\n  {\"model\":\"" + std + "\",\"task_type\":\"image\",\"input\":{\"prompt\":\"p\"}}  \n", std, "p", "1:1", "1K", 0},
	}
	for _, ratio := range catalog.AspectRatios {
		tests = append(tests, struct {
			name       string
			body       string
			wantModel  string
			wantPrompt string
			wantRatio  string
			wantSize   string
			wantURLs   int
		}{"ratio " + ratio, `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":"` + ratio + `"}}`, std, "p", ratio, "1K", 0})
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := d.Decode([]byte(tt.body))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if r.Model.ID != tt.wantModel || r.Prompt != tt.wantPrompt || r.AspectRatio != tt.wantRatio || r.ImageSize != tt.wantSize || len(r.ImageURLs) != tt.wantURLs {
				t.Errorf("got model=%s prompt=%q ratio=%q size=%q urls=%d; want %s %q %q %q %d",
					r.Model.ID, clip(r.Prompt), r.AspectRatio, r.ImageSize, len(r.ImageURLs),
					tt.wantModel, clip(tt.wantPrompt), tt.wantRatio, tt.wantSize, tt.wantURLs)
			}
		})
	}
}

// What is made: the format (png unless named), a jpeg or webp quality
// (90 unless named; none for png) and how many images (1 unless
// named).
func TestDecodeOutput(t *testing.T) {
	tests := []struct {
		name        string
		input       string
		wantFormat  string
		wantQuality int
		wantImages  int
	}{
		{"defaults", `{"prompt":"p"}`, "png", 0, 1},
		{"null fields are absent", `{"prompt":"p","output_format":null,"output_quality":null,"num_images":null}`, "png", 0, 1},
		{"jpeg at its default quality", `{"prompt":"p","output_format":"jpeg"}`, "jpeg", 90, 1},
		{"jpeg at quality 1", `{"prompt":"p","output_format":"jpeg","output_quality":1}`, "jpeg", 1, 1},
		{"jpeg at quality 100, four images", `{"prompt":"p","output_format":"jpeg","output_quality":100,"num_images":4}`, "jpeg", 100, 4},
		{"webp at its default quality", `{"prompt":"p","output_format":"webp"}`, "webp", 90, 1},
		{"webp at quality 50, two images", `{"prompt":"p","output_format":"webp","output_quality":50,"num_images":2}`, "webp", 50, 2},
		{"webp at quality 100 (lossless)", `{"prompt":"p","output_format":"webp","output_quality":100}`, "webp", 100, 1},
		{"png takes no quality", `{"prompt":"p","output_format":"png","output_quality":70}`, "png", 0, 1},
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := d.Decode([]byte(`{"model":"` + std + `","task_type":"image","input":` + tt.input + `}`))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if r.OutputFormat != tt.wantFormat || r.OutputQuality != tt.wantQuality || r.NumImages != tt.wantImages {
				t.Errorf("got format %q quality %d images %d; want %q %d %d", r.OutputFormat, r.OutputQuality, r.NumImages, tt.wantFormat, tt.wantQuality, tt.wantImages)
			}
		})
	}
}

func repeatURL(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"https://example.com/` + string(rune('a'+i)) + `.png"`
	}
	return strings.Join(parts, ",")
}

func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantMsg string // substring of the message
	}{
		{"empty body", ``, "request body is empty"},
		{"blank body", "  \n", "request body is empty"},
		{"malformed JSON", `{"model":`, "not valid JSON"},
		{"trailing garbage", `{"model":"x"} x`, "not valid JSON"},
		{"not an object", `[1,2]`, "must be a JSON object"},
		{"string body", `"hello"`, "must be a JSON object"},
		{"missing model", `{"task_type":"image","input":{"prompt":"p"}}`, "model is required"},
		{"empty model", `{"model":"","task_type":"image","input":{"prompt":"p"}}`, "model is required"},
		{"unknown model", `{"model":"gpt-image-1","task_type":"image","input":{"prompt":"p"}}`, `model "gpt-image-1" is not supported`},
		{"model of another family", `{"model":"nano-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`, "is not supported"},
		{"model case matters", `{"model":"LUMEN-2.5-flash-image","task_type":"image","input":{"prompt":"p"}}`, "is not supported"},
		{"model wrong type", `{"model":5,"task_type":"image","input":{"prompt":"p"}}`, "model must be a string"},
		{"missing task_type", `{"model":"` + std + `","input":{"prompt":"p"}}`, "task_type is required"},
		{"wrong task_type", `{"model":"` + std + `","task_type":"video","input":{"prompt":"p"}}`, `task_type "video" is not supported`},
		{"task_type wrong type", `{"model":"` + std + `","task_type":true,"input":{"prompt":"p"}}`, "task_type must be a string"},
		{"missing input", `{"model":"` + std + `","task_type":"image"}`, "input is required"},
		{"null input", `{"model":"` + std + `","task_type":"image","input":null}`, "input is required"},
		{"input wrong type", `{"model":"` + std + `","task_type":"image","input":"draw"}`, "input must be an object"},
		{"missing prompt", `{"model":"` + std + `","task_type":"image","input":{}}`, "input.prompt is required"},
		{"null prompt", `{"model":"` + std + `","task_type":"image","input":{"prompt":null}}`, "input.prompt is required"},
		{"blank prompt", `{"model":"` + std + `","task_type":"image","input":{"prompt":" \t\n "}}`, "input.prompt must not be blank"},
		{"prompt wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":42}}`, "input.prompt must be a string"},
		{"prompt too long", `{"model":"` + std + `","task_type":"image","input":{"prompt":"` + strings.Repeat("a", MaxPromptChars+1) + `"}}`, "the limit is 10000"},
		{"bad aspect ratio", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":"7:3"}}`, `input.aspect_ratio "7:3" is not supported`},
		{"aspect ratio with spaces", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":"16 : 9"}}`, "input.aspect_ratio"},
		{"aspect ratio wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","aspect_ratio":1.5}}`, "input.aspect_ratio must be a string"},
		{"image_size on standard", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_size":"1K"}}`, "input.image_size is not supported by model " + std},
		{"lowercase image_size", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"2k"}}`, `input.image_size "2k" is not supported`},
		{"unknown image_size", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":"8K"}}`, "use 1K, 2K or 4K"},
		{"image_size wrong type", `{"model":"` + pro + `","task_type":"image","input":{"prompt":"p","image_size":2}}`, "input.image_size must be a string"},
		{"empty image_urls", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":[]}}`, "input.image_urls must hold 1 to 10 URLs"},
		{"eleven image_urls", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":[` + repeatURL(11) + `]}}`, "has 11 URLs; the limit is 10"},
		{"image_urls not an array", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":"https://example.com/a.png"}}`, "input.image_urls must be an array of strings"},
		{"image_urls element wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":[1]}}`, "input.image_urls must be an array of strings"},
		{"ftp url", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["ftp://example.com/a.png"]}}`, "input.image_urls[0] must be an absolute http or https URL"},
		{"file url", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["https://example.com/a.png","file:///etc/passwd"]}}`, "input.image_urls[1] must be an absolute http or https URL"},
		{"data url", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["data:image/png;base64,AAAA"]}}`, "input.image_urls[0]"},
		{"relative url", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["/a.png"]}}`, "input.image_urls[0] must be an absolute"},
		{"url without host", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http:///a.png"]}}`, "input.image_urls[0] must be an absolute"},
		{"unparseable url", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://[::1"]}}`, "input.image_urls[0] must be an absolute"},
		{"url too long", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["https://example.com/` + strings.Repeat("a", MaxURLLen) + `"]}}`, "input.image_urls[0] is longer than 2048"},
		{"loopback literal", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://127.0.0.1/a.png"]}}`, "input.image_urls[0] points to a loopback address"},
		{"metadata literal", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://169.254.169.254/latest/meta-data/"]}}`, "input.image_urls[0] points to a link-local address"},
		{"ipv6 loopback literal", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://[::1]/a.png"]}}`, "loopback"},
		{"port not allowed", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://example.com:8080/a.png"]}}`, "port 8080"},
		{"unknown output_format", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"gif"}}`, `input.output_format "gif" is not supported; use one of png, jpeg, webp`},
		{"output_format jpg", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"jpg"}}`, `input.output_format "jpg" is not supported`},
		{"uppercase output_format", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"PNG"}}`, `input.output_format "PNG" is not supported`},
		{"output_format wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":1}}`, "input.output_format must be a string"},
		{"output_quality 0", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"jpeg","output_quality":0}}`, "input.output_quality must be an integer from 1 to 100"},
		{"output_quality 101", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"jpeg","output_quality":101}}`, "input.output_quality must be an integer from 1 to 100"},
		{"output_quality fractional", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"jpeg","output_quality":80.5}}`, "input.output_quality must be an integer"},
		{"output_quality huge", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_quality":1e400}}`, "input.output_quality must be an integer"},
		{"output_quality wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_quality":true}}`, "input.output_quality must be an integer"},
		{"num_images 0", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":0}}`, "input.num_images must be an integer from 1 to 4"},
		{"num_images 5", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":5}}`, "input.num_images must be an integer from 1 to 4"},
		{"num_images negative", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":-1}}`, "input.num_images must be an integer from 1 to 4"},
		{"num_images fractional", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":1.5}}`, "input.num_images must be an integer from 1 to 4"},
		{"num_images in an exponent form", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":3.0e0}}`, "input.num_images must be an integer from 1 to 4"},
		{"num_images as a string", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":"2"}}`, "input.num_images must be an integer from 1 to 4"},
		{"output_quality as a string", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","output_format":"jpeg","output_quality":"80"}}`, "input.output_quality must be an integer from 1 to 100"},
		{"num_images wrong type", `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","num_images":[2]}}`, "input.num_images must be an integer"},
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Decode([]byte(tt.body))
			if err == nil {
				t.Fatal("Decode succeeded; want an error")
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid {
				t.Fatalf("error %v: want an apperr with code %s", err, apperr.Invalid)
			}
			if !strings.Contains(e.Message, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", e.Message, tt.wantMsg)
			}
		})
	}
}

// A source URL whose host denotes a refused address in a form other than
// dotted decimal (what inet_aton, resolvers and browsers accept) is refused at
// create time like the dotted-decimal literal: 400, naming the field, and
// without echoing the host or the address.
func TestDecodeRefusesAddressForms(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		addr    string // the address the host denotes
		wantMsg string
	}{
		{"two parts", "http://127.1/a.png", "127.0.0.1", "points to a loopback address"},
		{"three parts", "http://127.0.1/a.png", "127.0.0.1", "points to a loopback address"},
		{"one hex part", "http://0x7f000001/a.png", "127.0.0.1", "points to a loopback address"},
		{"one decimal part", "http://2130706433/a.png", "127.0.0.1", "points to a loopback address"},
		{"octal first part", "http://0177.0.0.1/a.png", "127.0.0.1", "points to a loopback address"},
		{"zero", "http://0/a.png", "0.0.0.0", "points to an unspecified address"},
		{"trailing dot", "http://127.0.0.1./a.png", "127.0.0.1", "points to a loopback address"},
		{"trailing dot and port", "https://127.0.0.1.:443/a.png", "127.0.0.1", "points to a loopback address"},
		{"full-width digits", "http://１２７.０.０.１/a.png", "127.0.0.1", "points to a loopback address"},
		{"full-width digits, percent-encoded", "http://%EF%BC%91%EF%BC%92%EF%BC%97.0.0.1/a.png", "127.0.0.1", "points to a loopback address"},
		{"ideographic full stop", "http://127。0。0。1/a.png", "127.0.0.1", "points to a loopback address"},
		{"full-width full stop", "http://127．0．0．1/a.png", "127.0.0.1", "points to a loopback address"},
		{"half-width ideographic full stop", "http://127｡0｡0｡1/a.png", "127.0.0.1", "points to a loopback address"},
		{"metadata, one decimal part", "http://2852039166/latest/meta-data/", "169.254.169.254", "points to a link-local address"},
		{"metadata, hex parts", "http://0xa9.0xfe.0xa9.0xfe/latest/meta-data/", "169.254.169.254", "points to a link-local address"},
		{"private, two parts", "http://10.1/a.png", "10.0.0.1", "points to a private address"},
		{"private, full-width", "http://１９２．１６８．０．１/a.png", "192.168.0.1", "points to a private address"},
	}
	d := newDecoder(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["` + tt.url + `"]}}`
			_, err := d.Decode([]byte(body))
			if err == nil {
				t.Fatalf("Decode(%s) succeeded; want a 400 naming input.image_urls[0]", tt.url)
			}
			e, ok := apperr.As(err)
			if !ok || e.Code != apperr.Invalid {
				t.Fatalf("error %v: want an apperr with code %s", err, apperr.Invalid)
			}
			if want := "input.image_urls[0] " + tt.wantMsg; !strings.Contains(e.Message, want) {
				t.Errorf("message %q does not contain %q", e.Message, want)
			}
			host := tt.url[strings.Index(tt.url, "//")+2:]
			host = host[:strings.IndexAny(host, ":/")]
			why := strings.TrimPrefix(e.Message, "input.image_urls[0] ") // "0" is a host here
			if strings.Contains(why, host) || strings.Contains(why, tt.addr) {
				t.Errorf("message %q names the host or its address", e.Message)
			}
		})
	}
	// The index is the offending URL's, after public ones.
	body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["https://example.com/a.png","http://0x7f000001/b.png"]}}`
	_, err := d.Decode([]byte(body))
	if e, ok := apperr.As(err); !ok || e.Code != apperr.Invalid || !strings.Contains(e.Message, "input.image_urls[1] points to a loopback address") {
		t.Errorf("second URL refused: got %v; want a 400 naming input.image_urls[1]", err)
	}
	// Public addresses in these forms are accepted.
	for _, u := range []string{"http://0x08080808/a.png", "https://８.８.８.８/a.png", "http://8.8.8.8./a.png", "http://256.1.1.1/a.png"} {
		body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["` + u + `"]}}`
		if _, err := d.Decode([]byte(body)); err != nil {
			t.Errorf("Decode(%s): %v; want accepted", u, err)
		}
	}
}

func TestAllowPrivateLiftsLiteralCheck(t *testing.T) {
	d := newDecoder(t)
	d.Egress = egress.Policy{AllowPrivate: true}
	body := `{"model":"` + std + `","task_type":"image","input":{"prompt":"p","image_urls":["http://127.0.0.1:8099/a.png"]}}`
	if _, err := d.Decode([]byte(body)); err != nil {
		t.Fatalf("with AllowPrivate: %v", err)
	}
}

func TestCheckContentType(t *testing.T) {
	tests := []struct {
		ct   string
		want apperr.Code // "" for accepted
	}{
		{"application/json", ""},
		{"application/json; charset=utf-8", ""},
		{"Application/JSON; charset=UTF-8", ""},
		{"", apperr.UnsupportedMediaType},
		{"text/plain", apperr.UnsupportedMediaType},
		{"application/x-www-form-urlencoded", apperr.UnsupportedMediaType},
		{"multipart/form-data; boundary=x", apperr.UnsupportedMediaType},
		{"application/json; charset=latin1", apperr.UnsupportedMediaType},
		{"application/jsonx", apperr.UnsupportedMediaType},
		{";;;", apperr.UnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.ct, func(t *testing.T) {
			err := CheckContentType(tt.ct)
			if got := apperr.CodeOf(err); got != tt.want {
				t.Errorf("CheckContentType(%q) = %v; want code %q", tt.ct, err, tt.want)
			}
		})
	}
}

func TestReadBody(t *testing.T) {
	tests := []struct {
		name          string
		size          int
		contentLength int64
		want          apperr.Code
	}{
		{"small", 100, 100, ""},
		{"exactly the limit", MaxBodyBytes, MaxBodyBytes, ""},
		{"one byte over, declared", MaxBodyBytes + 1, MaxBodyBytes + 1, apperr.TooLarge},
		{"one byte over, undeclared", MaxBodyBytes + 1, -1, apperr.TooLarge},
		{"huge declared length refused unread", 10, 1 << 30, apperr.TooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ReadBody(strings.NewReader(strings.Repeat("x", tt.size)), tt.contentLength)
			if got := apperr.CodeOf(err); got != tt.want {
				t.Fatalf("ReadBody = %v; want code %q", err, tt.want)
			}
			if err == nil && len(b) != tt.size {
				t.Errorf("read %d bytes; want %d", len(b), tt.size)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	d := newDecoder(b)
	body := []byte(`{"model":"` + pro + `","task_type":"image","input":{"prompt":"a lighthouse on a cliff at dusk, oil painting","aspect_ratio":"16:9","image_size":"2K"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(body); err != nil {
			b.Fatal(err)
		}
	}
}
