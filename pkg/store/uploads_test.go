package store

import (
	"testing"
	"time"

	"github.com/easelhq/easel/tools/testkit/redistest"
)

// An account's uploads of a day count up to the budget and no further; a
// refused upload counts nothing; the next UTC day starts from zero; the
// counter expires after its day; accounts are counted apart.
func TestUploadBytesStayWithinTheDaysBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	u := NewUploads(NewDB(rdb, Options{}))
	// Tomorrow: the counters' expiry (an hour after their day) is ahead of
	// Redis's clock, whatever day the test runs.
	tomorrow := time.Now().UTC().AddDate(0, 0, 1)
	day := time.Date(tomorrow.Year(), tomorrow.Month(), tomorrow.Day(), 10, 0, 0, 0, time.UTC)
	steps := []struct {
		name     string
		account  string
		size     int64
		at       time.Time
		wantUsed int64
		wantOK   bool
	}{
		{"first upload", "acct1", 600, day, 600, true},
		{"up to the budget", "acct1", 400, day.Add(time.Hour), 1000, true},
		{"one byte over", "acct1", 1, day.Add(2 * time.Hour), 1000, false},
		{"another account", "acct2", 1000, day, 1000, true},
		{"the next day", "acct1", 700, day.Add(14 * time.Hour), 700, true},
		{"larger than a day's budget", "acct3", 1001, day, 0, false},
	}
	for _, st := range steps {
		used, ok, err := u.Count(ctx, st.account, st.size, 1000, st.at)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if used != st.wantUsed || ok != st.wantOK {
			t.Errorf("%s: Count = %d, %v; want %d, %v", st.name, used, ok, st.wantUsed, st.wantOK)
		}
	}
	key := uploadBytesKey("acct1", day.Format("20060102"))
	exp, err := rdb.PExpireTime(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(day.Year(), day.Month(), day.Day()+1, 1, 0, 0, 0, time.UTC); !time.UnixMilli(exp.Milliseconds()).Equal(want) {
		t.Errorf("counter expires at %v; want %v", time.UnixMilli(exp.Milliseconds()).UTC(), want)
	}
	if n, _ := rdb.Exists(ctx, uploadBytesKey("acct3", day.Format("20060102"))).Result(); n != 0 {
		t.Errorf("a refused upload left a counter")
	}
}
