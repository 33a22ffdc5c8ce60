package task

import (
	"testing"

	"github.com/easelhq/easel/pkg/catalog"
)

func TestDefaults(t *testing.T) {
	std := catalog.Model{ID: "lumen-2.5-flash-image", Tier: catalog.Standard}
	tests := []struct {
		name      string
		in        Input
		src       [2]int // first source's width and height
		wantSize  string
		wantRatio string // after WithDefaults
		wantOut   string // OutputAspectRatio
	}{
		{"text-to-image, nothing given", Input{Model: std}, [2]int{}, "1K", "1:1", "1:1"},
		{"text-to-image, ratio given", Input{Model: std, AspectRatio: "16:9"}, [2]int{}, "1K", "16:9", "16:9"},
		{"pro size kept", Input{ImageSize: "4K", AspectRatio: "9:16"}, [2]int{}, "4K", "9:16", "9:16"},
		{"edit, ratio from a wide source", Input{ImageURLs: []string{"u"}}, [2]int{640, 360}, "1K", "", "16:9"},
		{"edit, ratio from a tall source", Input{ImageURLs: []string{"u"}}, [2]int{300, 400}, "1K", "", "3:4"},
		{"edit, ratio given wins over the source", Input{ImageURLs: []string{"u"}, AspectRatio: "1:1"}, [2]int{640, 360}, "1K", "1:1", "1:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.WithDefaults()
			if got.ImageSize != tt.wantSize || got.AspectRatio != tt.wantRatio {
				t.Errorf("WithDefaults = size %q ratio %q; want %q %q", got.ImageSize, got.AspectRatio, tt.wantSize, tt.wantRatio)
			}
			if again := got.WithDefaults(); again.ImageSize != got.ImageSize || again.AspectRatio != got.AspectRatio {
				t.Errorf("WithDefaults is not idempotent: %+v then %+v", got, again)
			}
			if out := got.OutputAspectRatio(tt.src[0], tt.src[1]); out != tt.wantOut {
				t.Errorf("OutputAspectRatio = %q; want %q", out, tt.wantOut)
			}
		})
	}
}
