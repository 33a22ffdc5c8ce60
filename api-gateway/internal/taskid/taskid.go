// Package taskid makes task ids: "task_<family>_<number>", where the number is
// the decimal form of a 128-bit ULID (48 bits of Unix milliseconds, then 80
// bits of monotonic randomness from crypto/rand).
//
// Ids are unique across any number of gateway replicas without coordination (a
// collision needs two replicas to draw the same 80 random bits in the same
// millisecond) and roughly time-ordered: ids of different milliseconds sort by
// time, numerically and, since every number until the year 2200 has 37 digits,
// as strings too.
package taskid

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Generator makes task ids for one model family. It is safe for concurrent
// use.
type Generator struct {
	prefix  string
	entropy *ulid.LockedMonotonicReader
	now     func() time.Time
}

// New returns a generator of ids "task_<family>_<number>".
func New(family string) *Generator {
	return &Generator{
		prefix:  "task_" + family + "_",
		entropy: &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(rand.Reader, 0)},
		now:     time.Now,
	}
}

// New returns a fresh id.
func (g *Generator) New() (string, error) {
	id, err := ulid.New(ulid.Timestamp(g.now()), g.entropy)
	if err != nil {
		return "", err
	}
	hi := binary.BigEndian.Uint64(id[0:8])
	lo := binary.BigEndian.Uint64(id[8:16])
	var buf [64]byte
	b := append(buf[:0], g.prefix...)
	b = appendUint128(b, hi, lo)
	return string(b), nil
}

// Valid reports whether s has the shape of a task id: "task_", a family word,
// "_", and 1 to 39 decimal digits. It does not say the task exists.
func Valid(s string) bool {
	rest, ok := strings.CutPrefix(s, "task_")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return false
	}
	family, num := rest[:i], rest[i+1:]
	if len(num) == 0 || len(num) > 39 || len(family) > 32 {
		return false
	}
	for j := 0; j < len(family); j++ {
		c := family[j]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	for j := 0; j < len(num); j++ {
		if num[j] < '0' || num[j] > '9' {
			return false
		}
	}
	return true
}

const chunk = 1e19 // the largest power of ten below 2^64

// appendUint128 appends the decimal form of hi<<64|lo.
func appendUint128(b []byte, hi, lo uint64) []byte {
	// Split into base-1e19 digits, least significant first; at most three.
	var parts [3]uint64
	n := 0
	for {
		qhi := hi / chunk
		qlo, r := bits.Div64(hi%chunk, lo, chunk)
		parts[n] = r
		n++
		hi, lo = qhi, qlo
		if hi == 0 && lo == 0 {
			break
		}
	}
	b = strconv.AppendUint(b, parts[n-1], 10)
	for i := n - 2; i >= 0; i-- {
		s := strconv.FormatUint(parts[i], 10)
		b = append(b, "0000000000000000000"[:19-len(s)]...)
		b = append(b, s...)
	}
	return b
}
