package api_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/easelhq/easel/pkg/account"
)

// The account's usage through the API: by day, model and key, a key's
// alone with key=, and as CSV with the refunds; another account's keys
// are not seen.
func TestAccountUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createID(e.KeyA, okBody)
	refunded := e.createID(e.KeyA, okBody)
	if r := e.keyed("POST", "/v1/task/cancel", e.KeyA, `{"task_id":"`+refunded+`"}`); r.Status != 200 {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
	e.createID(e.KeyB, okBody)
	prefix := account.VisibleOf(e.KeyA)
	type usageReply struct {
		Data struct {
			Days   []account.UsageDay `json:"days"`
			Models []string           `json:"models"`
			Keys   []string           `json:"keys"`
		} `json:"data"`
	}
	r := e.keyed("GET", "/v1/account/usage?days=2", e.KeyA, "")
	u := decode[usageReply](t, r)
	if r.Status != 200 || len(u.Data.Days) != 2 || strings.Join(u.Data.Keys, ",") != prefix || strings.Join(u.Data.Models, ",") != std {
		t.Fatalf("usage: %d %s", r.Status, r.Body)
	}
	today := u.Data.Days[1]
	price := today.Models[std].Credits
	want := account.Usage{Tasks: 1, Credits: price, Refunds: 1, RefundedCredits: price}
	if today.Date != time.Now().UTC().Format(time.DateOnly) || price <= 0 || today.Models[std] != want || today.Keys[prefix][std] != want {
		t.Errorf("today %+v; want one task kept and one refunded, all of key %s", today, prefix)
	}
	if u := decode[usageReply](t, e.keyed("GET", "/v1/account/usage?days=1&key=esk_00000000", e.KeyA, "")); len(u.Data.Days[0].Models) != 0 {
		t.Errorf("usage of a key that made nothing: %+v", u.Data.Days[0])
	}
	if u := decode[usageReply](t, e.keyed("GET", "/v1/account/usage?days=1&key="+prefix, e.KeyA, "")); u.Data.Days[0].Models[std] != want {
		t.Errorf("usage of key %s: %+v", prefix, u.Data.Days[0])
	}
	csv := e.keyed("GET", "/v1/account/usage.csv?days=1", e.KeyA, "")
	p := func(n int64) string { return strconv.FormatInt(n, 10) }
	wantCSV := "date,model,key,tasks,credits,refunds,refunded_credits\n" + today.Date + "," + std + "," + prefix + ",1," + p(price) + ",1," + p(price) + "\n"
	if csv.Status != 200 || !strings.HasPrefix(csv.Header.Get("Content-Type"), "text/csv") || string(csv.Body) != wantCSV {
		t.Errorf("CSV %d %s\n%q\nwant\n%q", csv.Status, csv.Header.Get("Content-Type"), csv.Body, wantCSV)
	}
	assertEnvelope(t, e.keyed("GET", "/v1/account/usage?days=32", e.KeyA, ""), http.StatusBadRequest, "days must be 1 to 31")
	assertEnvelope(t, e.Do("GET", "/v1/account/usage", nil, ""), http.StatusUnauthorized, "")
}
