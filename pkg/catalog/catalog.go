// Package catalog describes the models Easel offers: their public ids, tiers,
// aspect ratios, image sizes and the exact output pixel dimensions of each.
package catalog

import (
	"fmt"
	"math"
	"regexp"
	"strings"
)

// Tier is a model's place in the line-up. Each tier has its own queue.
type Tier string

// Tiers.
const (
	Standard Tier = "standard"
	Pro      Tier = "pro"
)

// Tiers lists every tier, in display order.
var Tiers = []Tier{Standard, Pro}

// Model id suffixes; the public id is "<family>-<suffix>".
const (
	standardSuffix = "2.5-flash-image"
	proSuffix      = "3-pro-image-preview"
)

// Image sizes (pro only).
const (
	Size1K = "1K"
	Size2K = "2K"
	Size4K = "4K"
)

// AspectRatios lists the supported aspect ratios.
var AspectRatios = []string{"1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"}

// DefaultAspectRatio is the ratio of a text-to-image task that names none.
const DefaultAspectRatio = "1:1"

// ImageSizes lists the pro model's sizes.
var ImageSizes = []string{Size1K, Size2K, Size4K}

// Dimensions is a width and height in pixels.
type Dimensions struct{ Width, Height int }

func (d Dimensions) String() string { return fmt.Sprintf("%dx%d", d.Width, d.Height) }

// The upstream models' own 1K output sizes.
var (
	standardDims = map[string]Dimensions{
		"1:1": {1024, 1024}, "2:3": {832, 1248}, "3:2": {1248, 832},
		"3:4": {864, 1184}, "4:3": {1184, 864}, "4:5": {896, 1152},
		"5:4": {1152, 896}, "9:16": {768, 1344}, "16:9": {1344, 768},
		"21:9": {1536, 672},
	}
	pro1KDims = map[string]Dimensions{
		"1:1": {1024, 1024}, "2:3": {848, 1264}, "3:2": {1264, 848},
		"3:4": {896, 1200}, "4:3": {1200, 896}, "4:5": {928, 1152},
		"5:4": {1152, 928}, "9:16": {768, 1376}, "16:9": {1376, 768},
		"21:9": {1584, 672},
	}
	sizeScale = map[string]int{Size1K: 1, Size2K: 2, Size4K: 4}
)

// Model is one offered model.
type Model struct {
	ID   string // public id, e.g. "lumen-2.5-flash-image"
	Tier Tier
}

// SupportsImageSize reports whether the model takes input.image_size.
func (m Model) SupportsImageSize() bool { return m.Tier == Pro }

// Dimensions returns the output size for a ratio and image size ("" means
// 1K). ok is false for an unsupported combination.
func (m Model) Dimensions(aspectRatio, imageSize string) (d Dimensions, ok bool) {
	if imageSize == "" {
		imageSize = Size1K
	}
	switch m.Tier {
	case Standard:
		if imageSize != Size1K {
			return Dimensions{}, false
		}
		d, ok = standardDims[aspectRatio]
		return d, ok
	case Pro:
		scale, okSize := sizeScale[imageSize]
		base, okRatio := pro1KDims[aspectRatio]
		if !okSize || !okRatio {
			return Dimensions{}, false
		}
		return Dimensions{base.Width * scale, base.Height * scale}, true
	}
	return Dimensions{}, false
}

var familyRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,31}$`)

// ValidFamily reports whether s can be a model family word: lowercase letters
// and digits, starting with a letter, at most 32 characters. The family appears
// in model ids and task ids.
func ValidFamily(s string) bool { return familyRE.MatchString(s) }

// TierOfID returns the tier of a model id of any family ("" if id is no
// model's).
func TierOfID(id string) Tier {
	switch {
	case strings.HasSuffix(id, "-"+standardSuffix):
		return Standard
	case strings.HasSuffix(id, "-"+proSuffix):
		return Pro
	}
	return ""
}

// Catalog is the set of models for one family word.
type Catalog struct {
	family string
	models []Model
}

// New returns the catalog for a family word (see ValidFamily).
func New(family string) (*Catalog, error) {
	if !ValidFamily(family) {
		return nil, fmt.Errorf("model family %q: want lowercase letters and digits, starting with a letter, at most 32 characters", family)
	}
	return &Catalog{
		family: family,
		models: []Model{
			{ID: family + "-" + standardSuffix, Tier: Standard},
			{ID: family + "-" + proSuffix, Tier: Pro},
		},
	}, nil
}

// Family returns the family word.
func (c *Catalog) Family() string { return c.family }

// Models returns the models, standard first.
func (c *Catalog) Models() []Model { return append([]Model(nil), c.models...) }

// Lookup finds a model by its public id.
func (c *Catalog) Lookup(id string) (Model, bool) {
	for _, m := range c.models {
		if m.ID == id {
			return m, true
		}
	}
	return Model{}, false
}

// ByTier returns the model of a tier.
func (c *Catalog) ByTier(t Tier) (Model, bool) {
	for _, m := range c.models {
		if m.Tier == t {
			return m, true
		}
	}
	return Model{}, false
}

// ParseTier reads a tier name ("standard", "pro") or a model id.
func (c *Catalog) ParseTier(s string) (Tier, bool) {
	if t := Tier(s); t == Standard || t == Pro {
		return t, true
	}
	if m, ok := c.Lookup(s); ok {
		return m.Tier, true
	}
	return "", false
}

// IDs returns the public model ids joined for messages.
func (c *Catalog) IDs() string {
	ids := make([]string, len(c.models))
	for i, m := range c.models {
		ids[i] = m.ID
	}
	return strings.Join(ids, ", ")
}

// ValidAspectRatio reports whether r is supported.
func ValidAspectRatio(r string) bool {
	for _, a := range AspectRatios {
		if a == r {
			return true
		}
	}
	return false
}

// ValidImageSize reports whether s is a supported image size.
func ValidImageSize(s string) bool { return sizeScale[s] != 0 }

// NearestAspectRatio returns the supported ratio closest to width:height,
// comparing on a log scale so 2:1 and 1:2 are equally far from 1:1.
func NearestAspectRatio(width, height int) string {
	if width <= 0 || height <= 0 {
		return DefaultAspectRatio
	}
	target := math.Log(float64(width) / float64(height))
	best, bestDist := DefaultAspectRatio, math.Inf(1)
	for _, r := range AspectRatios {
		var w, h float64
		if _, err := fmt.Sscanf(r, "%g:%g", &w, &h); err != nil {
			continue
		}
		if d := math.Abs(math.Log(w/h) - target); d < bestDist {
			best, bestDist = r, d
		}
	}
	return best
}
