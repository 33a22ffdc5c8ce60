package catalog

import "testing"

func TestDimensions(t *testing.T) {
	c, err := New("lumen")
	if err != nil {
		t.Fatal(err)
	}
	std, _ := c.Lookup("lumen-2.5-flash-image")
	pro, _ := c.Lookup("lumen-3-pro-image-preview")
	tests := []struct {
		m           Model
		ratio, size string
		w, h        int
		ok          bool
	}{
		{std, "1:1", "", 1024, 1024, true},
		{std, "2:3", "1K", 832, 1248, true},
		{std, "3:2", "1K", 1248, 832, true},
		{std, "3:4", "1K", 864, 1184, true},
		{std, "4:3", "1K", 1184, 864, true},
		{std, "4:5", "1K", 896, 1152, true},
		{std, "5:4", "1K", 1152, 896, true},
		{std, "9:16", "1K", 768, 1344, true},
		{std, "16:9", "1K", 1344, 768, true},
		{std, "21:9", "1K", 1536, 672, true},
		{std, "1:1", "2K", 0, 0, false},
		{pro, "1:1", "1K", 1024, 1024, true},
		{pro, "2:3", "1K", 848, 1264, true},
		{pro, "3:2", "1K", 1264, 848, true},
		{pro, "3:4", "1K", 896, 1200, true},
		{pro, "4:3", "1K", 1200, 896, true},
		{pro, "4:5", "1K", 928, 1152, true},
		{pro, "5:4", "1K", 1152, 928, true},
		{pro, "9:16", "1K", 768, 1376, true},
		{pro, "16:9", "1K", 1376, 768, true},
		{pro, "21:9", "1K", 1584, 672, true},
		{pro, "16:9", "2K", 2752, 1536, true},
		{pro, "9:16", "4K", 3072, 5504, true},
		{pro, "1:1", "4K", 4096, 4096, true},
		{pro, "1:1", "8K", 0, 0, false},
		{pro, "7:3", "1K", 0, 0, false},
	}
	for _, tt := range tests {
		d, ok := tt.m.Dimensions(tt.ratio, tt.size)
		if ok != tt.ok || d.Width != tt.w || d.Height != tt.h {
			t.Errorf("%s %s %s = %v %v; want %dx%d %v", tt.m.ID, tt.ratio, tt.size, d, ok, tt.w, tt.h, tt.ok)
		}
	}
	// Every supported combination has a size.
	for _, r := range AspectRatios {
		if _, ok := std.Dimensions(r, Size1K); !ok {
			t.Errorf("standard %s missing", r)
		}
		for _, s := range ImageSizes {
			if _, ok := pro.Dimensions(r, s); !ok {
				t.Errorf("pro %s %s missing", r, s)
			}
		}
	}
}

func TestFamily(t *testing.T) {
	for fam, ok := range map[string]bool{"lumen": true, "nova2": true, "": false, "Lumen": false, "2nova": false, "lu-men": false, "a_b": false} {
		_, err := New(fam)
		if (err == nil) != ok {
			t.Errorf("New(%q) = %v; want ok=%v", fam, err, ok)
		}
	}
	c, _ := New("nova")
	if m, ok := c.Lookup("nova-3-pro-image-preview"); !ok || m.Tier != Pro {
		t.Error("family word not applied to the pro model id")
	}
	if _, ok := c.Lookup("lumen-3-pro-image-preview"); ok {
		t.Error("default family accepted under another family")
	}
}

func TestNearestAspectRatio(t *testing.T) {
	tests := []struct {
		w, h int
		want string
	}{
		{1000, 1000, "1:1"}, {1920, 1080, "16:9"}, {1080, 1920, "9:16"}, {4000, 3000, "4:3"},
		{3000, 4000, "3:4"}, {2560, 1080, "21:9"}, {10000, 100, "21:9"}, {100, 10000, "9:16"},
		{1200, 1000, "5:4"}, {600, 900, "2:3"}, {0, 10, "1:1"},
	}
	for _, tt := range tests {
		if got := NearestAspectRatio(tt.w, tt.h); got != tt.want {
			t.Errorf("NearestAspectRatio(%d, %d) = %s; want %s", tt.w, tt.h, got, tt.want)
		}
	}
}
