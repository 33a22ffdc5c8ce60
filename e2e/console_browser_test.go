package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/easelhq/easel/pkg/account"
	"github.com/easelhq/easel/pkg/redisconn"
	"github.com/easelhq/easel/pkg/upstream"
	"github.com/easelhq/easel/pkg/webhook"
)

// noUpstreamPool is what the operator view says when the workers run with
// one key.
const noUpstreamPool = "No upstream pool: the workers run with one key (EASEL_UPSTREAMS_FILE is not set)."

// TestConsoleBrowser drives the account console in headless chromium
// against the real stack: sign-in through the form; a key made with the
// keyboard alone in the key dialog, limited to the standard model, used
// from the test (standard 200, pro 403) and revoked in the page (401
// within the auth cache's bound); the usage chart and the task gallery
// drawn from real tasks; the operator view with its accounts and
// upstreams; no horizontal scroll at 390 px; no console or CSP errors.
// Screenshots go to $EASEL_ARTIFACTS (or the test's artifact directory).
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the browser test is not part of make test-short")
	}
	t.Parallel()
	b := startBrowser(t)
	s := startStack(t, stackOptions{simDelay: time.Second})
	dir := artifactDir(t)
	defer func() {
		if t.Failed() {
			b.screenshot(t, dir, "console-failed.png")
			t.Logf("the browser console:\n%s", strings.Join(b.allMessages(), "\n"))
		}
	}()
	ctx := context.Background()
	const (
		email   = "browser@e2e.example"
		pw      = "browser password 1"
		keyName = "e2e browser key"
	)
	acct := consoleUser(t, s, email, pw, true)

	// ---- sign in through the form ------------------------------------
	b.do(t, 30*time.Second,
		chromedp.Navigate(s.base+"/console"),
		chromedp.WaitVisible(chromedp.ID("signin-email")),
		chromedp.SendKeys(chromedp.ID("signin-email"), email),
		chromedp.SendKeys(chromedp.ID("signin-password"), pw),
		chromedp.Click(chromedp.ID("signin-submit")),
		chromedp.WaitVisible(chromedp.ID("whoami")),
		chromedp.WaitVisible(chromedp.ID("keys")),
	)
	if p := eval[string](t, b, `location.pathname`); p != "/console/" {
		t.Errorf("the console is at %s; want /console/", p)
	}
	if who := eval[string](t, b, `document.getElementById('whoami').textContent`); who != email {
		t.Errorf("the header shows %q; want %q", who, email)
	}
	// The account's first key (startStack's) is listed.
	waitFor(t, b, 10*time.Second, "the keys list", `document.querySelectorAll('#keys-table tbody tr').length >= 1`)

	// ---- the key dialog, with the keyboard alone ----------------------
	b.do(t, 10*time.Second, chromedp.Focus(chromedp.ID("new-key")), chromedp.KeyEvent(kb.Enter))
	waitFor(t, b, 5*time.Second, "the key dialog open with the focus on its name",
		`document.getElementById('key-dialog').open && document.activeElement === document.getElementById('key-name')`)
	b.do(t, 10*time.Second, chromedp.KeyEvent(keyName), chromedp.KeyEvent(kb.Tab))
	if id := activeID(t, b); id != "key-model-standard" {
		t.Fatalf("Tab from the name focused #%s; want #key-model-standard", id)
	}
	b.do(t, 10*time.Second, chromedp.KeyEvent(" "))
	if got := eval[[]bool](t, b, `[document.getElementById('key-model-standard').checked, document.getElementById('key-model-pro').checked]`); !got[0] || got[1] {
		t.Fatalf("after Space: standard ticked %v, pro ticked %v; want standard only", got[0], got[1])
	}
	if name := eval[string](t, b, `document.getElementById('key-name').value`); name != keyName {
		t.Errorf("the name field holds %q; want %q", name, keyName)
	}
	b.do(t, 10*time.Second, chromedp.KeyEvent(kb.Enter))
	waitFor(t, b, 10*time.Second, "the new key shown",
		`document.getElementById('secret-dialog').open && document.getElementById('key-secret').textContent.startsWith('esk_')`)
	key := eval[string](t, b, `document.getElementById('key-secret').textContent`)
	if id := activeID(t, b); id != "key-copy" {
		t.Errorf("the key's dialog focused #%s; want #key-copy", id)
	}
	b.do(t, 10*time.Second, chromedp.KeyEvent(kb.Escape))
	// The dialog's close event comes after it closes: the page then forgets
	// the key and puts the focus on New key.
	waitFor(t, b, 5*time.Second, "the key's dialog closed by Escape, the key gone from the page",
		`!document.getElementById('secret-dialog').open && document.getElementById('key-secret').textContent === ''`)
	if id := activeID(t, b); id != "new-key" {
		t.Errorf("after the key's dialog closed the focus is on #%s; want #new-key", id)
	}
	prefix := account.VisibleOf(key)
	row := `#keys-table tr[data-prefix="` + prefix + `"]`
	waitFor(t, b, 10*time.Second, "the new key's row", `!!document.querySelector('`+row+`')`)
	if got := eval[string](t, b, `document.querySelector('`+row+`').textContent`); !strings.Contains(got, keyName) || !strings.Contains(got, "standard") || !strings.Contains(got, "active") {
		t.Errorf("the new key's row reads %q; want its name, active, standard", got)
	}
	b.screenshot(t, dir, "console-keys.png")

	// ---- the key from the API: its model limit, then revoked ------------
	var limitedTask string
	{
		st, body := post(t, s.base+"/v1/task/create", key, createBody(std, `{"prompt":"a key limited to the standard model"}`))
		if st != 200 {
			t.Fatalf("standard create with the new key: %d %s; want 200", st, body)
		}
		var env struct {
			Data struct {
				TaskID string `json:"task_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Data.TaskID == "" {
			t.Fatalf("create answer %s: %v", body, err)
		}
		limitedTask = env.Data.TaskID
		if st, body := post(t, s.base+"/v1/task/create", key, createBody(pro, `{"prompt":"not for this key","image_size":"1K"}`)); st != 403 {
			t.Errorf("pro create with the standard-only key: %d %s; want 403", st, body)
		}
	}
	// ---- the account's default webhook endpoint -----------------------
	// Set in the Webhooks section, tested with a signed test event; a task
	// created without a callback_url then delivers there, and its delivery
	// is on the account's log, redelivered from it.
	sink := newHookSink(t, nil)
	b.do(t, 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#webhooks'`),
		chromedp.WaitVisible(chromedp.ID("endpoint-form")),
	)
	waitFor(t, b, 10*time.Second, "the endpoint loaded, none set", `document.getElementById('endpoint-state').textContent.startsWith('No endpoint')`)
	b.do(t, 10*time.Second,
		chromedp.SendKeys(chromedp.ID("endpoint-url"), sink.srv.URL+"/account"),
		chromedp.Click(chromedp.ID("endpoint-save")),
	)
	waitFor(t, b, 10*time.Second, "the endpoint saved", `document.getElementById('endpoint-state').textContent.startsWith('Tasks without')`)
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("endpoint-test")))
	waitFor(t, b, 15*time.Second, "the test event's answer", `!document.getElementById('endpoint-test-result').hidden`)
	if got := eval[string](t, b, `document.getElementById('endpoint-test-result').textContent`); !strings.Contains(got, "Delivered: HTTP 200") {
		t.Errorf("the test event's answer reads %q; want delivered", got)
	}
	secret := adminSecret(t, s.base, acct)
	test := sink.waitCalls(t, "/account", 1, nil)[0]
	if err := webhook.Verify(secret, test.header, test.body, time.Now()); err != nil || !strings.Contains(string(test.body), `"type":"webhook.test"`) {
		t.Errorf("the test event %s: %v; want a webhook.test signed with the account's secret", test.body, err)
	}
	var hooked string
	{
		st, body := post(t, s.base+"/v1/task/create", key, createBody(std, `{"prompt":"to the account's endpoint"}`))
		var env struct {
			Data struct {
				TaskID string `json:"task_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &env); st != 200 || err != nil {
			t.Fatalf("create without a callback: %d %s", st, body)
		}
		hooked = env.Data.TaskID
	}
	done := sink.waitCalls(t, "/account", 1, func(c hookCall) bool {
		return c.header.Get("webhook-id") == webhook.MessageID(hooked, "task.completed", 0)
	})[0]
	if err := webhook.Verify(secret, done.header, done.body, time.Now()); err != nil {
		t.Errorf("the completion at the account's endpoint: %v", err)
	}
	hookRow := `#deliveries-table tr[data-webhook-id="` + webhook.MessageID(hooked, "task.completed", 0) + `"]`
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("deliveries-refresh")))
	waitFor(t, b, 10*time.Second, "the delivery on the account's log, delivered",
		`!!document.querySelector('`+hookRow+`') && document.querySelector('`+hookRow+`').textContent.includes('delivered')`)
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(hookRow+` button`)))
	sink.waitCalls(t, "/account", 2, func(c hookCall) bool {
		return c.header.Get("webhook-id") == webhook.MessageID(hooked, "task.completed", 0)
	})
	waitFor(t, b, 10*time.Second, "the redelivery's attempt on the log",
		`!!document.querySelector('`+hookRow+`') && document.querySelector('`+hookRow+` td[data-label="Attempts"]').textContent === '2'`)
	b.screenshot(t, dir, "console-webhooks.png")
	// Back on the keys, which loads them again and replaces their rows: the
	// row still shown is marked, and the revoke waits for the new one (a
	// click on the old one can find it gone).
	b.do(t, 10*time.Second, chromedp.Evaluate[chromedp.Void](`document.querySelector('`+row+`').dataset.stale = '1'; location.hash = '#keys'`), chromedp.WaitVisible(chromedp.ID("keys")))
	waitFor(t, b, 10*time.Second, "the keys loaded again", `!!document.querySelector('`+row+`') && !document.querySelector('`+row+`').dataset.stale`)

	b.do(t, 10*time.Second,
		chromedp.Click(chromedp.CSS(row+` .revoke`)),
		chromedp.WaitVisible(chromedp.ID("revoke-confirm")),
	)
	if text := eval[string](t, b, `document.getElementById('revoke-text').textContent`); !strings.Contains(text, prefix) {
		t.Errorf("the revoke dialog says %q; want the key's prefix %s", text, prefix)
	}
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("revoke-confirm")))
	revoked := time.Now()
	waitFor(t, b, 10*time.Second, "the key shown revoked",
		`!document.getElementById('revoke-dialog').open && document.querySelector('`+row+`').dataset.status === 'revoked'`)
	for {
		st, body := post(t, s.base+"/v1/task/query?task_id="+limitedTask, key, "")
		if st == 401 {
			t.Logf("the revoked key was refused %v after the revoke", time.Since(revoked).Round(time.Millisecond))
			break
		}
		if time.Since(revoked) > 5*time.Second {
			t.Fatalf("the revoked key is still taken 5 s after the revoke: %d %s", st, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.screenshot(t, dir, "console-keys-revoked.png")

	// ---- tasks for the usage chart and the gallery ----------------------
	k2, _, err := s.accounts.CreateKey(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, s.base, k2)
	ids := []string{
		limitedTask,
		c.create(createBody(std, `{"prompt":"a lighthouse at dusk","aspect_ratio":"16:9"}`)),
		c.create(createBody(std, `{"prompt":"a red fox in snow"}`)),
		c.create(createBody(pro, `{"prompt":"a tall tower","aspect_ratio":"9:16","image_size":"1K"}`)),
	}
	for _, id := range ids {
		if rec, _, _ := c.poll(id, 60*time.Second); rec.Status != "completed" {
			t.Fatalf("task %s ended %s: %+v", id, rec.Status, rec.Error)
		}
	}

	// ---- usage: the chart ------------------------------------------------
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#nav a[data-section="usage"]`)), chromedp.WaitVisible(chromedp.ID("usage")))
	waitFor(t, b, 10*time.Second, "the usage chart with bars",
		`(() => { const c = document.getElementById('usage-chart'); return c instanceof SVGSVGElement && c.querySelectorAll('rect.bar').length >= 1; })()`)
	legend := eval[string](t, b, `document.getElementById('usage-legend').textContent`)
	if !strings.Contains(legend, std) || !strings.Contains(legend, pro) {
		t.Errorf("the chart's legend reads %q; want both models", legend)
	}
	waitFor(t, b, 10*time.Second, "the ledger's rows", `document.querySelectorAll('#ledger-table tbody tr').length >= 4`)
	b.screenshot(t, dir, "console-usage.png")
	// Filtered by the first key (the standard model's only): its usage alone.
	if keys := eval[[]string](t, b, `[...document.querySelectorAll('#usage-key option')].map((o) => o.value)`); !slices.Contains(keys, prefix) || !slices.Contains(keys, account.VisibleOf(k2)) {
		t.Errorf("the key filter offers %q; want both keys that made tasks", keys)
	}
	b.do(t, 10*time.Second, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('usage-key'); s.value = '`+prefix+`'; s.dispatchEvent(new Event('change')); })()`))
	waitFor(t, b, 10*time.Second, "the chart of the first key's usage alone",
		`document.getElementById('usage-csv').href.includes('key=`+prefix+`') && document.getElementById('usage-legend').textContent.includes('`+std+`') && !document.getElementById('usage-legend').textContent.includes('`+pro+`')`)
	csvText := eval[string](t, b, `(async () => (await fetch(document.getElementById('usage-csv').href)).text())()`, chromedp.EvalAwaitPromise)
	if !strings.HasPrefix(csvText, "date,model,key,tasks,credits,refunds,refunded_credits\n") || !strings.Contains(csvText, ","+std+","+prefix+",2,") || strings.Contains(csvText, pro) {
		t.Errorf("the first key's usage CSV:\n%s", csvText)
	}
	b.screenshot(t, dir, "console-usage-key.png")
	b.do(t, 10*time.Second, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('usage-key'); s.value = ''; s.dispatchEvent(new Event('change')); })()`))
	waitFor(t, b, 10*time.Second, "the chart of every task again", `document.getElementById('usage-legend').textContent.includes('`+pro+`')`)

	// ---- tasks: the gallery ---------------------------------------------
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#nav a[data-section="tasks"]`)), chromedp.WaitVisible(chromedp.ID("tasks")))
	waitFor(t, b, 20*time.Second, "the gallery's "+strconv.Itoa(len(ids))+" thumbnails loaded", galleryLoaded(len(ids)))
	for _, id := range ids {
		if !eval[bool](t, b, `!!document.querySelector('#gallery li[data-task-id="`+id+`"] img')`) {
			t.Errorf("task %s has no thumbnail in the gallery", id)
		}
	}
	// Each card shows its task's prompt, and its image is described by it.
	for id, prompt := range map[string]string{ids[1]: "a lighthouse at dusk", ids[2]: "a red fox in snow"} {
		card := `document.querySelector('#gallery li[data-task-id="` + id + `"]')`
		if got := eval[string](t, b, `(`+card+`.querySelector('.card-prompt') || {}).textContent || ''`); got != prompt {
			t.Errorf("task %s's card shows the prompt %q; want %q", id, got, prompt)
		}
		if alt := eval[string](t, b, card+`.querySelector('img').alt`); alt != prompt {
			t.Errorf("task %s's thumbnail is described %q; want its prompt %q", id, alt, prompt)
		}
	}
	// A task's details: its prompt, its JSON and its image.
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#gallery li[data-task-id="`+ids[1]+`"] button`)), chromedp.WaitVisible(chromedp.ID("task-detail")))
	waitFor(t, b, 20*time.Second, "the task's details with its image",
		`document.getElementById('task-json').textContent.includes('"status": "completed"') &&
		 [...document.querySelectorAll('#task-detail-images img')].some((i) => i.complete && i.naturalWidth > 0)`)
	if j := eval[string](t, b, `document.getElementById('task-json').textContent`); !strings.Contains(j, ids[1]) {
		t.Errorf("the task's JSON %q is not task %s's", j, ids[1])
	}
	if p := eval[string](t, b, `document.getElementById('task-detail-prompt').textContent`); p != "a lighthouse at dusk" {
		t.Errorf("the task's details show the prompt %q; want %q", p, "a lighthouse at dusk")
	}
	painted(t, b)
	b.screenshot(t, dir, "console-tasks.png")

	// ---- the playground: the /playground page's, with the session --------
	// An edit of a local file, uploaded with the session.
	source := filepath.Join(t.TempDir(), "kite.png")
	if err := os.WriteFile(source, pngBytes(t, 320, 320), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#nav a[data-section="playground"]`)), chromedp.WaitVisible(chromedp.ID("playground")),
		chromedp.SetUploadFiles(chromedp.ID("pg-image-files"), []string{source}))
	waitFor(t, b, 15*time.Second, "the playground's upload in the source URLs",
		`document.getElementById('pg-image-urls').value.includes('/v1/files/uploads/') && document.querySelectorAll('#pg-uploads li').length === 1`)
	uploaded := eval[string](t, b, `document.getElementById('pg-image-urls').value`)
	b.do(t, 10*time.Second,
		chromedp.SendKeys(chromedp.ID("pg-prompt"), "a kite over the sea"),
		chromedp.Click(chromedp.ID("pg-submit")))
	waitFor(t, b, 60*time.Second, "the playground's task completed, its image loaded",
		`document.getElementById('pg-task').dataset.status === 'completed' &&
		 [...document.querySelectorAll('#pg-results img')].some((i) => i.complete && i.naturalWidth > 0)`)
	if src := eval[string](t, b, `document.getElementById('pg-task').dataset.source`); src != "stream" {
		t.Errorf("the playground followed its task by %q; want the stream", src)
	}
	// Its record read with the session (a query with the account's key
	// would keep the key's cached limits, which the operator view changes
	// below).
	var pgRec taskRecord
	if err := json.Unmarshal([]byte(eval[string](t, b, `fetch('/console/api/task/query?task_id=' + encodeURIComponent(document.getElementById('pg-task-id').textContent)).then((r) => r.text())`, chromedp.EvalAwaitPromise)), &pgRec); err != nil {
		t.Fatal(err)
	}
	if pgRec.Input == nil || !slices.Equal(pgRec.Input.ImageURLs, []string{uploaded}) {
		t.Errorf("the playground's task %+v; want input.image_urls [%s]", pgRec.Input, uploaded)
	}
	painted(t, b)
	b.screenshot(t, dir, "console-playground.png")

	// ---- the operator view ------------------------------------------------
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("nav-operator")), chromedp.WaitVisible(chromedp.ID("operator")))
	waitFor(t, b, 10*time.Second, "the accounts list with the user's account",
		`!!document.querySelector('#operator-results tr[data-account-id="`+acct+`"]')`)
	if n := eval[int](t, b, `document.querySelectorAll('#operator-results tbody tr').length`); n < 4 {
		t.Errorf("the operator view lists %d accounts; want the stack's 4 at least", n)
	}
	waitFor(t, b, 10*time.Second, "the upstreams panel's empty-pool message", `!document.getElementById('upstreams-empty').hidden`)
	if msg := eval[string](t, b, `document.getElementById('upstreams-empty').textContent`); msg != noUpstreamPool {
		t.Errorf("the upstreams panel says %q; want %q", msg, noUpstreamPool)
	}
	if !eval[bool](t, b, `document.getElementById('upstreams-wrap').hidden`) {
		t.Error("the upstreams table is shown for an empty pool")
	}
	b.screenshot(t, dir, "console-operator.png")

	// ---- the operator's key table: limits, edit, revoke -----------------
	k2Prefix := account.VisibleOf(k2)
	opRow := `#op-keys tr[data-prefix="` + k2Prefix + `"]`
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(`#operator-results tr[data-account-id="`+acct+`"] button`)))
	waitFor(t, b, 10*time.Second, "the account's keys in the operator view", `!!document.querySelector('`+opRow+`')`)
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(opRow+` .edit`)))
	waitFor(t, b, 5*time.Second, "the key editor open on the key's name",
		`document.getElementById('op-key-dialog').open && document.activeElement === document.getElementById('op-key-name')`)
	if got := eval[string](t, b, `document.getElementById('op-key-prefix').textContent`); got != k2Prefix {
		t.Errorf("the key editor is for %q; want %s", got, k2Prefix)
	}
	b.do(t, 10*time.Second,
		chromedp.SendKeys(chromedp.ID("op-key-name"), "edited by ops"),
		chromedp.SendKeys(chromedp.ID("op-key-ips"), "203.0.113.0/24"),
		chromedp.SendKeys(chromedp.ID("op-key-spend-limit"), "12345"),
		chromedp.Click(chromedp.ID("op-key-save")))
	waitFor(t, b, 10*time.Second, "the key's row with its new limits",
		`!document.getElementById('op-key-dialog').open && (() => { const r = document.querySelector('`+opRow+`'); return !!r && r.textContent.includes('203.0.113.0/24') && r.textContent.includes('edited by ops'); })()`)
	if got := eval[string](t, b, `document.querySelector('`+opRow+` td[data-label="Spent / limit"]').textContent`); !strings.HasSuffix(got, "/ 12,345") {
		t.Errorf("the key's spend cell reads %q; want its limit, 12,345", got)
	}
	// The limits hold: the test's address is not in the key's networks.
	if st, body := post(t, s.base+"/v1/task/create", k2, createBody(std, `{"prompt":"from outside the key's networks"}`)); st != 403 {
		t.Errorf("create with the key limited to 203.0.113.0/24: %d %s; want 403", st, body)
	}
	b.do(t, 10*time.Second, chromedp.Click(chromedp.CSS(opRow+` .revoke`)), chromedp.WaitVisible(chromedp.ID("revoke-confirm")))
	if text := eval[string](t, b, `document.getElementById('revoke-text').textContent`); !strings.Contains(text, k2Prefix) || !strings.Contains(text, "up to 2 s") {
		t.Errorf("the revoke dialog says %q; want the key's prefix and the gateways' 2 s", text)
	}
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("revoke-confirm")))
	waitFor(t, b, 10*time.Second, "the key shown revoked in the operator's table",
		`!document.getElementById('revoke-dialog').open && document.querySelector('`+opRow+`').dataset.status === 'revoked'`)
	// Refused within the auth cache's bound (2 s), polled every 100 ms.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for opRevoked := time.Now(); ; <-tick.C {
		st, body := post(t, s.base+"/v1/task/query?task_id="+limitedTask, k2, "")
		if st == 401 {
			break
		}
		if time.Since(opRevoked) > 5*time.Second {
			t.Fatalf("the key the operator revoked is still taken 5 s later: %d %s", st, body)
		}
	}
	// One date format across the page: every time shown reads as the
	// page's date and time of its datetime.
	if odd := eval[[]string](t, b, `(() => {
		const f = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
		return [...document.querySelectorAll('time[datetime]')].filter((e) => e.textContent !== f.format(new Date(e.dateTime))).map((e) => e.textContent);
	})()`); len(odd) > 0 {
		t.Errorf("times in another format than the page's: %q", odd)
	}
	b.screenshot(t, dir, "console-operator-keys.png")

	// A pool as workers record it: one upstream cooling after a 429, one
	// with its breaker open after failures.
	publishPool(t, s)
	b.do(t, 10*time.Second, chromedp.Click(chromedp.ID("upstreams-refresh")))
	waitFor(t, b, 10*time.Second, "the upstreams table's two rows",
		`document.querySelectorAll('#upstreams-table tbody tr').length === 2 && document.getElementById('upstreams-empty').hidden`)
	type upRow struct {
		Name    string `json:"name"`
		Breaker string `json:"breaker"`
		Text    string `json:"text"`
	}
	rows := eval[[]upRow](t, b, `[...document.querySelectorAll('#upstreams-table tbody tr')].map((r) => ({name: r.dataset.upstream, breaker: r.dataset.breaker, text: r.textContent}))`)
	if len(rows) != 2 || rows[0].Name != "backup" || rows[1].Name != "main" {
		t.Fatalf("upstream rows %+v; want backup and main", rows)
	}
	if r := rows[0]; r.Breaker != "open" || !strings.Contains(r.Text, "open") || !strings.Contains(r.Text, "5 failures in a row") ||
		!strings.Contains(r.Text, "upstream answered 503") || !strings.Contains(r.Text, "proxy.example") || !strings.Contains(r.Text, "pro") {
		t.Errorf("backup's row %+v: want its breaker open, its failures, its newest error, its host and models", r)
	}
	if r := rows[1]; r.Breaker != "closed" || !strings.Contains(r.Text, "throttled") || !strings.Contains(r.Text, "standard") {
		t.Errorf("main's row %+v: want its breaker closed, cooling after a 429", r)
	}
	// The breaker in the workers' words (as easelctl upstream list says
	// it), and the file's refused change above the table.
	if r := rows[0]; !strings.Contains(r.Text, "open, probe due at ") {
		t.Errorf("backup's row %+v: want its breaker's probe time", r)
	}
	if f := eval[string](t, b, `document.getElementById('upstreams-file').hidden ? '' : document.getElementById('upstreams-file').textContent`); !strings.Contains(f, "/etc/easel/upstreams.json") ||
		!strings.Contains(f, `refused`) || !strings.Contains(f, `upstream "spare": provider is required`) {
		t.Errorf("the upstreams file's state reads %q; want its path and the refused change with why", f)
	}
	if cooling := eval[string](t, b, `document.querySelector('#upstreams-table tr[data-upstream="main"] td[data-label="Cooling until"]').textContent`); cooling == "—" || cooling == "" {
		t.Errorf("main's cooling until reads %q; want a time", cooling)
	}
	if strings.Contains(eval[string](t, b, `document.getElementById('upstreams-table').textContent`), "secret-gemini-key") {
		t.Error("the upstreams table shows a credential")
	}
	b.do(t, 10*time.Second, chromedp.ScrollIntoView(chromedp.ID("upstreams")))
	b.screenshot(t, dir, "console-operator-upstreams.png")

	// ---- a phone's width: no horizontal scroll in any section -----------
	b.do(t, 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	ready := map[string]string{
		"keys":       `document.querySelectorAll('#keys-table tbody tr').length >= 2`,
		"usage":      `!!document.querySelector('#usage-chart rect.bar') && document.getElementById('usage-chart').getBoundingClientRect().width <= 390`,
		"tasks":      galleryLoaded(len(ids)),
		"webhooks":   `true`,
		"playground": `document.querySelectorAll('#pg-model option').length >= 2`,
		"operator":   `document.querySelectorAll('#upstreams-table tbody tr').length === 2 && document.querySelectorAll('#operator-results tbody tr').length >= 4`,
	}
	for _, name := range []string{"keys", "usage", "tasks", "webhooks", "playground", "operator"} {
		b.do(t, 10*time.Second, chromedp.Evaluate[chromedp.Void](`location.hash = '#`+name+`'`), chromedp.WaitVisible(chromedp.ID(name)))
		waitFor(t, b, 20*time.Second, name+" at 390 px", ready[name])
		painted(t, b)
		w := eval[[]int](t, b, `[document.documentElement.scrollWidth, document.documentElement.clientWidth]`)
		if w[0] > 390 {
			t.Errorf("%s: the page is %d px wide at a 390 px viewport (%s)", name, w[0], eval[string](t, b, widest))
		}
		b.screenshot(t, dir, "console-390-"+name+".png")
	}
	// The key dialog fits too.
	b.do(t, 10*time.Second, chromedp.Evaluate[chromedp.Void](`location.hash = '#keys'`), chromedp.WaitVisible(chromedp.ID("keys")),
		chromedp.Focus(chromedp.ID("new-key")), chromedp.KeyEvent(kb.Enter))
	waitFor(t, b, 5*time.Second, "the key dialog at 390 px", `document.getElementById('key-dialog').open`)
	if w := eval[int](t, b, `Math.max(document.documentElement.scrollWidth, Math.ceil(document.getElementById('key-dialog').getBoundingClientRect().right))`); w > 390 {
		t.Errorf("the key dialog reaches %d px at a 390 px viewport", w)
	}
	viewportShot(t, b, dir, "console-390-key-dialog.png")
	b.do(t, 10*time.Second, chromedp.KeyEvent(kb.Escape))
	waitFor(t, b, 5*time.Second, "the key dialog closed by Escape", `!document.getElementById('key-dialog').open && document.activeElement === document.getElementById('new-key')`)

	if problems := consoleProblems(b); len(problems) > 0 {
		t.Errorf("the console shows:\n%s", strings.Join(problems, "\n"))
	}
}

// galleryLoaded is true once the gallery shows n cards at least, each
// with its thumbnail loaded.
func galleryLoaded(n int) string {
	return `(() => {
  const cards = document.querySelectorAll('#gallery li');
  const imgs = [...document.querySelectorAll('#gallery li img')];
  return cards.length >= ` + strconv.Itoa(n) + ` && imgs.length >= ` + strconv.Itoa(n) + ` && imgs.every((i) => i.complete && i.naturalWidth > 0);
})()`
}

// widest names the elements wider than the viewport, for the message of
// a failure.
const widest = `[...document.querySelectorAll('body *')]
  .filter((e) => e.offsetParent !== null && e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(0, 8)
  .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\s+/).join('.') : '') + ' ' + Math.round(e.getBoundingClientRect().right))
  .join(', ')`

// waitFor waits until expr is true in the page, or fails the test after
// timeout.
func waitFor(t *testing.T, b *browser, timeout time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !eval[bool](t, b, expr) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// activeID is the id of the focused element.
func activeID(t *testing.T, b *browser) string {
	t.Helper()
	return eval[string](t, b, `document.activeElement ? document.activeElement.id : ''`)
}

// painted waits for the page's images to decode and two frames to pass,
// so that a screenshot or a measure sees the page drawn.
func painted(t *testing.T, b *browser) {
	t.Helper()
	eval[bool](t, b, `Promise.all([...document.images].filter((i) => i.complete && i.naturalWidth > 0).map((i) => i.decode().catch(() => null)))
  .then(() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(true)))))`, chromedp.EvalAwaitPromise)
}

// viewportShot saves what the viewport shows (a modal dialog where the
// page's layout puts it; a full-page shot stretches the viewport).
func viewportShot(t *testing.T, b *browser, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot: %s", p)
}

// publishPool records an upstream pool as the workers would, with a 429 on
// one upstream and failures opening the other's breaker.
func publishPool(t *testing.T, s *stack) {
	t.Helper()
	ctx := context.Background()
	rdb, err := redisconn.Open(ctx, s.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	pool, err := upstream.Parse([]byte(`{
  "upstreams": [
    {"name": "main", "provider": "gemini", "api_key": "secret-gemini-key-1", "weight": 3, "models": ["standard"]},
    {"name": "backup", "provider": "gemini", "api_key": "secret-gemini-key-2", "base_url": "https://proxy.example/v1beta", "models": ["pro"], "rpm": 60, "concurrency": 4}
  ],
  "breaker": {"failures": 5, "cooldown": "5m", "throttle": "5m", "max_throttle": "10m"}
}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := upstream.Publish(ctx, rdb, pool); err != nil {
		t.Fatal(err)
	}
	br := upstream.NewBreakers(rdb, pool.Breaker)
	byName := map[string]upstream.Upstream{}
	for _, u := range pool.Upstreams {
		byName[u.Name] = u
	}
	if _, _, err := br.Report(ctx, byName["main"], upstream.Throttled, "upstream answered 429: resource exhausted"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, _, err := br.Report(ctx, byName["backup"], upstream.Failure, fmt.Sprintf("upstream answered 503: the model is overloaded (try %d)", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// The file loaded an hour ago; a change of it refused since.
	loaded := time.Now().Add(-time.Hour)
	if err := upstream.RecordLoaded(ctx, rdb, "/etc/easel/upstreams.json", loaded); err != nil {
		t.Fatal(err)
	}
	if err := upstream.RecordRefused(ctx, rdb, "/etc/easel/upstreams.json", loaded.Add(30*time.Minute), errors.New(`upstream "spare": provider is required`)); err != nil {
		t.Fatal(err)
	}
}

// consoleProblems are the browser console's errors, warnings and uncaught
// exceptions (a refusal by the Content-Security-Policy is one), but for
// the one expected: the 401 of GET /console/api/session that tells the
// page, before the sign-in, that nobody is signed in.
func consoleProblems(b *browser) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	expected := 1
	for _, m := range b.console {
		if !m.IsException() && m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleWarning {
			continue
		}
		if expected > 0 && strings.Contains(m.Text, "status of 401") && strings.HasSuffix(m.URL, "/console/api/session") {
			expected--
			continue
		}
		out = append(out, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
	}
	return out
}

// allMessages are every message of the browser console, for a failure's
// log.
func (b *browser) allMessages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.console))
	for _, m := range b.console {
		out = append(out, fmt.Sprintf("%s %s:%d %s", m.Type, m.URL, m.Line+1, m.Text))
	}
	return out
}
