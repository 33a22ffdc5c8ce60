// Easel account console: plain JavaScript, no framework, no build step.
// It talks only to /console/api/... on its own origin; the session cookie
// authenticates, and every write sends the session's CSRF token.
//
// Safety rules kept throughout: text from the server is only ever put in
// the page with textContent / append(string) (never innerHTML), no inline
// styles or handlers (the page's CSP forbids them), charts are SVG built
// with createElementNS.
'use strict';

(() => {
  const API = '/console/api';
  const SECTIONS = ['keys', 'usage', 'tasks', 'webhooks', 'playground', 'operator'];
  const FINAL = new Set(['completed', 'failed', 'canceled']);
  const ACTIVE = new Set(['pending', 'processing']);
  const QUERY_WAIT_S = 10;
  const TOAST_MS = 6000;

  const $ = (id) => document.getElementById(id);
  // What the playground's script (loaded first) shares: a body read as
  // JSON (or its text as msg), and a URL checked to be http(s).
  const { readJSON, safeURL } = window.EaselPlayground;

  // state is everything the page knows about the signed-in user.
  const state = {
    user: null, // {id, email, account_id, account_name, admin}
    csrf: '',
    catalog: { models: [] },
    account: null,
    section: '',
    ledgerNext: '',
    galleryNext: '',
    usage: null,
    detail: null, // {id, ctl}: the task shown in the details panel
    opNext: '',
    opQuery: '',
    opAccount: null,
  };

  // ---- formatting ----------------------------------------------------------

  // One format of dates across the page: a medium date ("Nov 27, 2026"),
  // with a short time where the time matters; the chart's axis shows the
  // same month and day.
  const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  const dateFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });
  const shortDayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });
  const numFmt = new Intl.NumberFormat();

  // toDate reads an RFC 3339 string or Unix milliseconds; null for absent
  // values (empty, 0, Go's zero time).
  function toDate(v) {
    if (v === null || v === undefined || v === '' || v === 0) return null;
    const d = new Date(v);
    if (Number.isNaN(d.getTime()) || d.getUTCFullYear() < 1971) return null;
    return d;
  }

  function fmtTime(v, empty = '—') {
    const d = toDate(v);
    return d ? dateTimeFmt.format(d) : empty;
  }

  // fmtShort is for table cells: the page's date and time in a <time>,
  // its UTC form in the title.
  function fmtShort(v, empty = '—') {
    const d = toDate(v);
    return d ? el('time', { datetime: d.toISOString(), title: `${rfc3339(d)} (UTC)` }, dateTimeFmt.format(d)) : empty;
  }

  function fmtDate(v, empty = '—') {
    const d = toDate(v);
    return d ? dateFmt.format(d) : empty;
  }

  function fmtNum(n) {
    return Number.isFinite(Number(n)) ? numFmt.format(Number(n)) : '—';
  }

  function fmtSigned(n) {
    const v = Number(n) || 0;
    return (v > 0 ? '+' : v < 0 ? '−' : '') + numFmt.format(Math.abs(v));
  }

  // dayOf reads "2026-11-25" as a local date (not UTC midnight, which
  // would show as the day before west of Greenwich).
  function dayOf(s) {
    const [y, m, d] = String(s).split('-').map(Number);
    return new Date(y, (m || 1) - 1, d || 1);
  }

  // rfc3339 renders a Date in UTC without milliseconds.
  function rfc3339(d) {
    return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
  }

  // ---- DOM helpers ----------------------------------------------------------

  // el creates an element. props: class, dataset, on (event handlers),
  // anything else an attribute. Children are nodes or strings (text).
  function el(tag, props = {}, ...kids) {
    const e = document.createElement(tag);
    setProps(e, props);
    e.append(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false).map((k) => (k instanceof Node ? k : String(k))));
    return e;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, props = {}, ...kids) {
    const e = document.createElementNS(SVG_NS, tag);
    setProps(e, props);
    e.append(...kids.map((k) => (k instanceof Node ? k : String(k))));
    return e;
  }

  function setProps(e, props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.setAttribute('class', v);
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function badge(text, kind) {
    return el('span', { class: `badge badge-${kind || text}` }, text);
  }

  // td makes a table cell; label is shown before the value when the table
  // collapses to cards on a narrow screen (the content is wrapped in one
  // span so that it stays one grid item there).
  function td(label, content, cls) {
    return el('td', { class: cls, dataset: { label } }, el('span', { class: 'cell' }, content));
  }

  // rowHead is the header cell of a row (its name), labelled as td is.
  function rowHead(label, content) {
    return el('th', { scope: 'row', dataset: { label } }, el('span', { class: 'cell' }, content));
  }

  function renderFacts(dl, pairs) {
    dl.replaceChildren(...pairs.map(([k, v]) => el('div', {}, el('dt', {}, k), el('dd', {}, v))));
  }

  // ---- the status line --------------------------------------------------------

  let toastTimer = 0;
  function toast(text, kind = 'info') {
    const t = $('toast');
    clearTimeout(toastTimer);
    t.dataset.kind = kind;
    t.textContent = text;
    toastTimer = setTimeout(() => { t.textContent = ''; }, kind === 'error' ? TOAST_MS * 2 : TOAST_MS);
  }

  // report shows a failed request's message, except for aborts and the end
  // of the session (the sign-in form says that).
  function report(err) {
    if (!err || err.name === 'AbortError' || err.sessionEnded) return;
    toast(err.message || String(err), 'error');
  }

  // ---- talking to the server ----------------------------------------------------

  class APIError extends Error {
    constructor(status, msg, retryAfter) {
      super(retryAfter ? `${msg} (retry in ${retryAfter} s)` : msg);
      this.status = status;
      this.retryAfter = retryAfter;
    }
  }

  // request calls a console route. envelope: the reply is {code,msg,data}
  // and data is returned; else (the task routes) the body itself.
  async function request(method, path, body, { envelope = true, signal, session = false } = {}) {
    const headers = { Accept: 'application/json' };
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store', signal };
    if (method !== 'GET') {
      headers['Content-Type'] = 'application/json';
      if (state.csrf) headers['X-CSRF-Token'] = state.csrf;
      if (method !== 'DELETE') init.body = JSON.stringify(body === undefined ? {} : body);
    }
    let resp;
    try {
      resp = await fetch(API + path, init);
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      throw new APIError(0, 'The server could not be reached: check the connection and try again.');
    }
    const reply = await readJSON(resp);
    if (!resp.ok) {
      const msg = (reply && typeof reply.msg === 'string' && reply.msg) || `${resp.status} ${resp.statusText}`;
      const err = new APIError(resp.status, msg, resp.headers.get('Retry-After'));
      if (resp.status === 401 && !session && state.user) sessionEnded(err);
      throw err;
    }
    return envelope ? (reply ? reply.data : null) : reply;
  }

  const api = {
    get: (path, opts) => request('GET', path, undefined, opts),
    post: (path, body, opts) => request('POST', path, body, opts),
    patch: (path, body, opts) => request('PATCH', path, body, opts),
    put: (path, body, opts) => request('PUT', path, body, opts),
    del: (path, opts) => request('DELETE', path, undefined, opts),
  };

  const enc = encodeURIComponent;

  // ---- session -------------------------------------------------------------------

  function sessionEnded(err) {
    err.sessionEnded = true;
    state.user = null;
    state.csrf = '';
    for (const d of document.querySelectorAll('dialog[open]')) d.close();
    showSignin('Your session has ended: sign in again.');
  }

  function showSignin(message) {
    $('nav').hidden = true;
    $('user-box').hidden = true;
    $('account-line').hidden = true;
    showSection('signin');
    const e = $('signin-error');
    e.textContent = message || '';
    e.hidden = !message;
    $('signin-email').focus();
  }

  async function onSignin(ev) {
    ev.preventDefault();
    const btn = $('signin-submit');
    const err = $('signin-error');
    btn.disabled = true;
    err.hidden = true;
    try {
      const data = await api.post('/session', {
        email: $('signin-email').value.trim(),
        password: $('signin-password').value,
      }, { session: true });
      $('signin-password').value = '';
      await signedIn(data);
    } catch (e) {
      err.textContent = e.message;
      err.hidden = false;
      $('signin-password').select();
    } finally {
      btn.disabled = false;
    }
  }

  async function signedIn(data) {
    state.user = data.user;
    state.csrf = data.csrf_token || '';
    $('whoami').textContent = state.user.email;
    $('account-name').textContent = state.user.account_name || state.user.account_id;
    $('account-line').hidden = false;
    $('user-box').hidden = false;
    $('nav').hidden = false;
    $('nav-operator').hidden = !state.user.admin;
    await loadCatalog();
    refreshAccount();
    route(true);
    if (document.activeElement === document.body || !document.activeElement || document.activeElement.closest('#signin')) {
      $('main').focus({ preventScroll: true });
    }
  }

  async function signOut() {
    try {
      await api.del('/session', { session: true });
    } catch (e) {
      report(e);
      return;
    }
    // A fresh page forgets everything shown (keys, secrets, tasks).
    location.replace(location.pathname);
  }

  async function loadCatalog() {
    try {
      const c = await api.get('/catalog');
      state.catalog = {
        models: Array.isArray(c.models) ? c.models : [],
      };
    } catch (e) {
      report(e);
    }
    fillCatalogControls();
  }

  // tiers are the catalog's model tiers, in its order.
  function tiers() {
    const t = [...new Set(state.catalog.models.map((m) => m.tier))];
    return t.length ? t : ['standard', 'pro'];
  }

  function fillCatalogControls() {
    const { models } = state.catalog;
    for (const span of document.querySelectorAll('[data-model-of]')) {
      const m = models.find((x) => x.tier === span.dataset.modelOf);
      span.textContent = m ? `(${m.id})` : '';
    }
    $('filter-model').replaceChildren(el('option', { value: '' }, 'Any'), ...models.map((m) => el('option', { value: m.id }, m.id)));
  }

  async function refreshAccount() {
    try {
      const a = await api.get('/account');
      state.account = a;
      $('account-name').textContent = a.name || a.id;
      $('balance').textContent = fmtNum(a.credits);
      if (state.section === 'usage') renderAccountFacts();
    } catch (e) {
      report(e);
    }
  }

  // ---- sections and routing ---------------------------------------------------------

  function showSection(name) {
    for (const id of ['signin', ...SECTIONS]) $(id).hidden = id !== name;
    state.section = name;
    for (const a of document.querySelectorAll('#nav a')) {
      if (a.dataset.section === name) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  const loaders = {
    keys: () => loadKeys(),
    usage: () => { renderAccountFacts(); refreshAccount(); loadUsage(); loadLedger(true); },
    tasks: () => loadTasks(true),
    webhooks: () => { loadEndpoint(); loadDeliveries(); },
    playground: () => {},
    operator: () => { if (!$('operator-results').tBodies[0].rows.length) searchAccounts(true); loadUpstreams(); },
  };

  // route shows the section the hash names (#keys ...). An unknown hash
  // leaves the page as it is unless nothing is shown yet.
  function route(force) {
    if (!state.user) return;
    let name = location.hash.slice(1);
    const allowed = SECTIONS.includes(name) && (name !== 'operator' || state.user.admin);
    if (!allowed) {
      if (!force && SECTIONS.includes(state.section)) return;
      name = 'keys';
      if (location.hash) history.replaceState(null, '', '#keys');
    }
    if (name !== state.section || force) {
      showSection(name);
      loaders[name]();
    }
  }

  // ---- dialogs ------------------------------------------------------------------------

  // openDialog shows a modal dialog, focuses focusEl and, when it closes,
  // gives the focus back to whatever had it before, or to returnTo: an
  // element, or a function finding one (for a row redrawn meanwhile).
  function openDialog(dlg, focusEl, returnTo) {
    const opener = document.activeElement;
    dlg.addEventListener('close', () => {
      let target = typeof returnTo === 'function' ? returnTo() : returnTo;
      if (!target || !target.isConnected) target = opener;
      if (target && target.isConnected && typeof target.focus === 'function') target.focus();
    }, { once: true });
    dlg.showModal();
    if (focusEl) focusEl.focus();
  }

  function showError(box, text) {
    box.textContent = text;
    box.hidden = !text;
  }

  // confirmAction asks in dlg (the revoke or the generic confirm dialog);
  // run happens on OK, its error shown in the dialog, which stays open.
  function confirmAction(dlg, { heading, text, ok, run, returnTo }) {
    if (heading) dlg.querySelector('h2').textContent = heading;
    dlg.querySelector('.confirm-text').textContent = text;
    const errBox = dlg.querySelector('.confirm-error');
    const okBtn = dlg.querySelector('.confirm-ok');
    if (ok) okBtn.textContent = ok;
    showError(errBox, '');
    okBtn.onclick = async () => {
      okBtn.disabled = true;
      try {
        await run();
        dlg.close();
      } catch (e) {
        if (!e.sessionEnded) showError(errBox, e.message);
      } finally {
        okBtn.disabled = false;
      }
    };
    openDialog(dlg, dlg.querySelector('.dialog-close'), returnTo);
  }

  // copyText copies to the clipboard, or selects node's text for Ctrl+C.
  async function copyText(text, node) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return 'Copied.';
      } catch {
        // refused (no permission, no focus): select instead
      }
    }
    const range = document.createRange();
    range.selectNodeContents(node);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    let copied = false;
    try {
      copied = document.execCommand('copy');
    } catch {
      copied = false;
    }
    return copied ? 'Copied.' : 'Selected: press Ctrl+C (⌘C) to copy.';
  }

  // ---- API keys ---------------------------------------------------------------------

  async function loadKeys() {
    try {
      const data = await api.get('/keys');
      const keys = (data && data.keys) || [];
      $('keys-table').tBodies[0].replaceChildren(...keys.map(keyRow));
      $('keys-empty').hidden = keys.length > 0;
    } catch (e) {
      report(e);
    }
  }

  // keyCells are a key's cells but its actions, in the account's table and
  // the operator's alike: its state and every limit it holds.
  function keyCells(k) {
    const limit = Number.isFinite(k.spend_limit) && k.spend_limit > 0 ? fmtNum(k.spend_limit) : 'no limit';
    const models = k.models && k.models.length ? k.models.join(', ') : 'all';
    const ips = k.allowed_ips && k.allowed_ips.length ? k.allowed_ips.map((ip) => el('span', { class: 'mono ip' }, ip)) : 'any';
    const status = k.status === 'revoked' && toDate(k.revoked_at)
      ? [badge('revoked'), el('span', { class: 'sub' }, fmtShort(k.revoked_at))]
      : badge(k.status || 'active');
    return [
      rowHead('Name', k.name || el('span', { class: 'muted' }, '(no name)')),
      td('Prefix', el('code', { class: 'mono' }, k.prefix)),
      td('Status', status),
      td('Created', fmtShort(k.created_at)),
      td('Last used', fmtShort(k.last_used_at, 'never')),
      td('Spent / limit', `${fmtNum(k.spent || 0)} / ${limit}`),
      td('Models', models),
      td('IPs', ips),
      td('Expires', fmtShort(k.expires_at, 'never')),
    ];
  }

  function keyRow(k) {
    const label = k.name || k.prefix;
    const rename = el('button', { type: 'button', class: 'rename small', 'aria-label': `Rename key ${label}` }, 'Rename');
    const revoke = el('button', {
      type: 'button', class: 'revoke small danger-outline', 'aria-label': `Revoke key ${label}`,
      disabled: k.status === 'revoked',
    }, 'Revoke');
    rename.addEventListener('click', () => openRename(k));
    revoke.addEventListener('click', () => askRevoke(k));
    return el('tr', { dataset: { prefix: k.prefix, status: k.status || '' } },
      ...keyCells(k),
      td('Actions', el('span', { class: 'row-actions' }, rename, revoke), 'cell-actions'));
  }

  // keyButton finds a button of a key's row (rows are redrawn on change).
  function keyButton(prefix, cls) {
    return () => $('keys-table').querySelector(`tr[data-prefix="${CSS.escape(prefix)}"] .${cls}:not(:disabled)`);
  }

  // replaceKeyRow shows a key's new state in place.
  function replaceKeyRow(k) {
    const tr = $('keys-table').querySelector(`tr[data-prefix="${CSS.escape(k.prefix)}"]`);
    if (tr) tr.replaceWith(keyRow(k));
    else loadKeys();
  }

  function localDateValue(d) {
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  }

  function openKeyDialog() {
    const form = $('key-form');
    form.reset();
    showError($('key-error'), '');
    const tomorrow = new Date();
    tomorrow.setDate(tomorrow.getDate() + 1);
    $('key-expires').min = localDateValue(tomorrow);
    openDialog($('key-dialog'), $('key-name'));
  }

  // keyBody is the create request of the dialog, empty fields left out.
  function keyBody() {
    const body = { name: $('key-name').value.trim() };
    const models = [...document.querySelectorAll('#key-form input[type="checkbox"]:checked')].map((c) => c.value);
    if (models.length) body.models = models;
    const ips = $('key-ips').value.split(/[\r\n,]+/).map((s) => s.trim()).filter(Boolean);
    if (ips.length) body.allowed_ips = ips;
    const exp = $('key-expires').value; // "2027-01-01": local midnight of that day
    if (exp) body.expires_at = rfc3339(new Date(`${exp}T00:00:00`));
    const lim = $('key-spend-limit').value;
    if (lim !== '') body.spend_limit = Number(lim);
    return body;
  }

  async function onCreateKey(ev) {
    ev.preventDefault();
    const body = keyBody();
    if (!body.name) {
      showError($('key-error'), 'Give the key a name.');
      $('key-name').focus();
      return;
    }
    if ('spend_limit' in body && !(Number.isInteger(body.spend_limit) && body.spend_limit > 0)) {
      showError($('key-error'), 'The spend limit must be a whole number of credits, 1 or more.');
      $('key-spend-limit').focus();
      return;
    }
    const btn = $('key-create');
    btn.disabled = true;
    try {
      const data = await api.post('/keys', body);
      $('key-dialog').close();
      showSecret(data.key);
      loadKeys();
    } catch (e) {
      if (!e.sessionEnded) showError($('key-error'), e.message);
    } finally {
      btn.disabled = false;
    }
  }

  // showSecret shows the new key, once. Focus returns to "New key".
  function showSecret(key) {
    $('key-secret').textContent = key;
    $('key-copy-status').textContent = '';
    const dlg = $('secret-dialog');
    dlg.addEventListener('close', () => { $('key-secret').textContent = ''; }, { once: true });
    openDialog(dlg, $('key-copy'), $('new-key'));
  }

  function openRename(k) {
    $('rename-prefix').textContent = k.prefix;
    $('rename-name').value = k.name || '';
    $('rename-form').dataset.prefix = k.prefix;
    showError($('rename-error'), '');
    openDialog($('rename-dialog'), $('rename-name'), keyButton(k.prefix, 'rename'));
    $('rename-name').select();
  }

  async function onRename(ev) {
    ev.preventDefault();
    const prefix = $('rename-form').dataset.prefix;
    const btn = $('rename-save');
    btn.disabled = true;
    try {
      const k = await api.patch(`/keys/${enc(prefix)}`, { name: $('rename-name').value.trim() });
      $('rename-dialog').close();
      replaceKeyRow(k);
      toast(`Key ${k.prefix} renamed to “${k.name}”.`);
    } catch (e) {
      if (!e.sessionEnded) showError($('rename-error'), e.message);
    } finally {
      btn.disabled = false;
    }
  }

  // keyCacheText says how soon a key's revoke or change holds on every
  // gateway: each trusts what it read of a key for EASEL_AUTH_CACHE_TTL
  // (the page is told it).
  function keyCacheText(what) {
    const ms = Number(document.body.dataset.keyCacheMs);
    if (!(ms > 0)) return `Every gateway ${what} at once.`;
    const secs = ms % 1000 === 0 ? String(ms / 1000) : (ms / 1000).toFixed(1);
    return `Gateways may take up to ${secs} s to see it (each trusts the copy of a key it read for that long): until then some may still accept the key as it was; then every gateway ${what}.`;
  }

  // revokeText is the revoke dialog's question for a key.
  function revokeText(k) {
    return `Revoke “${k.name || k.prefix}” (${k.prefix})? ${keyCacheText('refuses it (401)')} This cannot be undone.`;
  }

  function askRevoke(k) {
    confirmAction($('revoke-dialog'), {
      text: revokeText(k),
      run: async () => {
        const updated = await api.post(`/keys/${enc(k.prefix)}/revoke`);
        replaceKeyRow(updated);
        toast(`Key ${k.prefix} revoked.`);
      },
      returnTo: keyButton(k.prefix, 'rename'),
    });
  }

  // ---- usage and credits ----------------------------------------------------------------

  function limitText(v, unit) {
    return Number(v) > 0 ? `${fmtNum(v)}${unit}` : 'default';
  }

  function renderAccountFacts() {
    const a = state.account;
    if (!a) return;
    renderFacts($('account-facts'), [
      ['Balance', `${fmtNum(a.credits)} credits`],
      ['Status', badge(a.status || 'active')],
      ['Models', a.models && a.models.length ? a.models.join(', ') : 'all'],
      ['Creates', limitText(a.rate_limit, ' / s per key')],
      ['Queries', limitText(a.query_rate_limit, ' / s per key')],
      ['In flight', limitText(a.max_inflight, ' tasks')],
      ['Account', el('span', { class: 'mono' }, a.id)],
      ['Since', fmtDate(a.created_at)],
    ]);
  }

  async function loadUsage() {
    const days = $('usage-days').value;
    const key = $('usage-key').value;
    const q = `days=${enc(days)}${key ? `&key=${enc(key)}` : ''}`;
    $('usage-csv').href = `${API}/usage.csv?${q}`;
    try {
      state.usage = await api.get(`/usage?${q}`);
      showUsageKeys(state.usage.keys || [], key);
      drawUsage();
    } catch (e) {
      report(e);
    }
  }

  // showUsageKeys lists the keys used in the period in the key filter,
  // keeping the one chosen.
  function showUsageKeys(keys, chosen) {
    const all = chosen && !keys.includes(chosen) ? [...keys, chosen] : keys;
    $('usage-key').replaceChildren(el('option', { value: '' }, 'All tasks'),
      ...all.map((k) => el('option', { value: k }, k)));
    $('usage-key').value = chosen;
  }

  // niceStep is a 1, 2 or 5 × 10^n step giving about `ticks` ticks to max.
  function niceStep(max, ticks) {
    const raw = Math.max(max, 1) / ticks;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  // drawUsage draws the stacked bars of credits per day, one colour per
  // model, as inline SVG sized to its box (redrawn when the box resizes).
  function drawUsage() {
    const data = state.usage;
    const box = $('usage-chart-box');
    if (!data || box.offsetParent === null) return;
    const days = Array.isArray(data.days) ? data.days : [];
    const models = Array.isArray(data.models) ? data.models : [];
    const W = Math.max(260, Math.floor(box.clientWidth));
    const H = W < 500 ? 200 : 260;
    const m = { top: 12, right: 8, bottom: 26, left: 44 };
    const pw = W - m.left - m.right;
    const ph = H - m.top - m.bottom;

    const credits = (d, model) => Number(((d.models || {})[model] || {}).credits) || 0;
    const tasksOf = (d, model) => Number(((d.models || {})[model] || {}).tasks) || 0;
    const totals = days.map((d) => models.reduce((s, mo) => s + credits(d, mo), 0));
    const step = niceStep(Math.max(0, ...totals), 4);
    const top = Math.max(step, Math.ceil(Math.max(0, ...totals) / step) * step);
    const y = (v) => m.top + ph - (v / top) * ph;
    const slot = pw / Math.max(days.length, 1);
    const bw = Math.max(2, Math.min(28, slot * 0.72));

    const sum = totals.reduce((a, b) => a + b, 0);
    const perModel = models.map((mo) => ({
      model: mo,
      credits: days.reduce((s, d) => s + credits(d, mo), 0),
      tasks: days.reduce((s, d) => s + tasksOf(d, mo), 0),
    }));
    const label = `Credits spent per day over the last ${days.length} days: ${fmtNum(sum)} in all` +
      (perModel.length ? '; ' + perModel.map((p) => `${p.model} ${fmtNum(p.credits)}`).join(', ') : '') + '.';

    const chart = svg('svg', {
      id: 'usage-chart', role: 'img', 'aria-label': label, viewBox: `0 0 ${W} ${H}`,
      width: W, height: H, class: 'chart-svg',
    }, svg('title', {}, label));

    // the grid and the y axis labels
    for (let v = 0; v <= top; v += step) {
      chart.append(
        svg('line', { x1: m.left, x2: W - m.right, y1: y(v), y2: y(v), class: v === 0 ? 'axis' : 'grid' }),
        svg('text', { x: m.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, fmtNum(v)));
    }

    // the bars: one group per day, its title the day's breakdown
    const every = Math.ceil(days.length / Math.max(1, Math.floor(pw / 56)));
    days.forEach((d, i) => {
      const cx = m.left + slot * i + slot / 2;
      const when = dayOf(d.date);
      const parts = models.filter((mo) => credits(d, mo) > 0)
        .map((mo) => `${mo}: ${fmtNum(credits(d, mo))} credits, ${fmtNum(tasksOf(d, mo))} tasks`);
      const g = svg('g', { class: 'day' },
        svg('title', {}, `${dateFmt.format(when)}: ${fmtNum(totals[i])} credits${parts.length ? '\n' + parts.join('\n') : ''}`),
        svg('rect', { x: m.left + slot * i, y: m.top, width: slot, height: ph, class: 'hit' }));
      let acc = 0;
      models.forEach((mo, k) => {
        const c = credits(d, mo);
        if (c <= 0) return;
        g.append(svg('rect', {
          x: cx - bw / 2, y: y(acc + c), width: bw, height: Math.max(1, y(acc) - y(acc + c)), class: `bar series-${k % 6}`,
        }));
        acc += c;
      });
      chart.append(g);
      // label every `every`-th day, counted back from the latest
      if ((days.length - 1 - i) % every === 0) {
        // keep the labels at either end inside the chart
        let anchor = 'middle';
        let lx = cx;
        if (cx + 26 > W) { anchor = 'end'; lx = W - 1; }
        if (cx - 26 < m.left - 20) { anchor = 'start'; lx = Math.max(1, m.left - 20); }
        chart.append(svg('text', { x: lx, y: H - 8, 'text-anchor': anchor, class: 'tick' }, shortDayFmt.format(when)));
      }
    });
    if (sum === 0) {
      chart.append(svg('text', { x: m.left + pw / 2, y: m.top + ph / 2, 'text-anchor': 'middle', class: 'empty' }, 'No credits spent in this period'));
    }
    box.replaceChildren(chart);

    $('usage-legend').replaceChildren(...perModel.map((p, k) => el('li', {},
      el('span', { class: `swatch series-${k % 6}`, 'aria-hidden': 'true' }),
      el('span', { class: 'mono' }, p.model),
      el('span', { class: 'muted' }, ` ${fmtNum(p.credits)} credits · ${fmtNum(p.tasks)} ${p.tasks === 1 ? 'task' : 'tasks'}`))));
  }

  async function loadLedger(reset) {
    const q = new URLSearchParams({ limit: '50' });
    if (!reset && state.ledgerNext) q.set('before', state.ledgerNext);
    try {
      const data = await api.get(`/ledger?${q}`);
      const entries = (data && data.entries) || [];
      const body = $('ledger-table').tBodies[0];
      if (reset) body.replaceChildren();
      body.append(...entries.map(ledgerRow));
      state.ledgerNext = (data && data.next) || '';
      $('ledger-more').hidden = !state.ledgerNext;
      $('ledger-empty').hidden = body.rows.length > 0;
    } catch (e) {
      report(e);
    }
  }

  function ledgerRow(e) {
    const what = [];
    if (e.task_id) {
      what.push(el('button', {
        type: 'button', class: 'link mono', title: 'Open the task',
        on: { click: () => openTaskFromLink(e.task_id) },
      }, e.task_id));
    }
    if (e.note) what.push(el('span', { class: 'note' }, e.note));
    return el('tr', {},
      td('Time', fmtTime(e.time), 'nowrap'),
      td('Kind', badge(e.kind)),
      td('Amount', fmtSigned(e.amount), `num ${Number(e.amount) < 0 ? 'neg' : 'pos'}`),
      td('Balance', fmtNum(e.balance), 'num'),
      td('Task / note', what.length ? what : '—', 'task-note'));
  }

  // ---- tasks ------------------------------------------------------------------------------

  async function loadTasks(reset) {
    const q = new URLSearchParams({ limit: '24' });
    if ($('filter-status').value) q.set('status', $('filter-status').value);
    if ($('filter-model').value) q.set('model', $('filter-model').value);
    if (!reset && state.galleryNext) q.set('cursor', state.galleryNext);
    const more = $('gallery-more');
    more.disabled = true;
    try {
      const data = await api.get(`/task/list?${q}`, { envelope: false });
      const tasks = (data && data.tasks) || [];
      const gallery = $('gallery');
      if (reset) gallery.replaceChildren();
      gallery.append(...tasks.map(taskCard));
      state.galleryNext = (data && data.next_cursor) || '';
      more.hidden = !state.galleryNext;
      $('gallery-empty').hidden = gallery.children.length > 0 || !!state.galleryNext;
    } catch (e) {
      report(e);
    } finally {
      more.disabled = false;
    }
  }

  function firstResult(t) {
    return t.status === 'completed' && Array.isArray(t.results) && t.results.length ? safeURL(t.results[0]) : null;
  }

  // promptOf is the prompt a task's record shows ('' for a record that
  // shows no input).
  function promptOf(t) {
    return (t && t.input && typeof t.input.prompt === 'string') ? t.input.prompt : '';
  }

  // taskCard is one task in the gallery: a button opening its details.
  function taskCard(t) {
    const src = firstResult(t);
    const prompt = promptOf(t);
    const thumb = el('span', { class: 'thumb', dataset: { status: t.status } });
    if (src) {
      const img = el('img', { alt: prompt, loading: 'lazy', decoding: 'async' });
      img.addEventListener('error', () => thumb.replaceChildren(el('span', { class: 'thumb-text' }, 'image unavailable')), { once: true });
      img.src = src;
      thumb.append(img);
    } else {
      thumb.append(el('span', { class: 'thumb-text' },
        t.status === 'processing' ? `${Number(t.progress) || 0} %` : t.status));
    }
    const btn = el('button', { type: 'button', class: 'card', 'aria-label': `${prompt ? `${prompt}, ` : ''}${t.model}, ${t.status}, ${fmtTime(t.create_time)}` },
      thumb,
      el('span', { class: 'card-meta' },
        prompt ? el('span', { class: 'card-prompt', title: prompt }, prompt) : null,
        el('span', { class: 'card-model mono' }, t.model),
        el('span', { class: 'card-line' }, badge(t.status), el('span', { class: 'muted' }, fmtTime(t.create_time)))));
    if (state.detail && state.detail.id === t.task_id) btn.setAttribute('aria-current', 'true');
    btn.addEventListener('click', () => showTaskDetail(t.task_id, t));
    return el('li', { dataset: { taskId: t.task_id } }, btn);
  }

  // markSelected shows which card the details panel is about.
  function markSelected(id) {
    for (const b of $('gallery').querySelectorAll('button[aria-current]')) b.removeAttribute('aria-current');
    const li = id && $('gallery').querySelector(`li[data-task-id="${CSS.escape(id)}"] button`);
    if (li) li.setAttribute('aria-current', 'true');
  }

  function updateCard(t) {
    const li = $('gallery').querySelector(`li[data-task-id="${CSS.escape(t.task_id)}"]`);
    if (li) li.replaceWith(taskCard(t));
  }

  function openTaskFromLink(id) {
    location.hash = '#tasks';
    route();
    showTaskDetail(id);
  }

  // showTaskDetail opens the details panel, then follows the task while it
  // is pending or processing (long-polling query with wait=).
  async function showTaskDetail(id, rec) {
    if (state.detail) state.detail.ctl.abort();
    const ctl = new AbortController();
    state.detail = { id, ctl };
    markSelected(id);
    const panel = $('task-detail');
    panel.hidden = false;
    $('task-detail-id').textContent = id;
    $('task-detail-prompt').textContent = promptOf(rec);
    $('task-detail-prompt').hidden = !promptOf(rec);
    $('task-detail-facts').textContent = rec ? taskFacts(rec) : '';
    $('task-json').textContent = rec ? JSON.stringify(rec, null, 2) : 'Loading…';
    $('task-detail-images').replaceChildren();
    $('task-cancel').hidden = true;
    $('task-webhooks').replaceChildren(el('p', { class: 'help' }, 'Loading…'));
    panel.focus({ preventScroll: true });
    if (window.matchMedia('(max-width: 900px)').matches) panel.scrollIntoView({ block: 'start' });

    loadTaskWebhooks(id, ctl.signal);
    let wait = 0;
    try {
      for (;;) {
        const t = await api.get(`/task/query?task_id=${enc(id)}${wait ? `&wait=${wait}` : ''}`, { envelope: false, signal: ctl.signal });
        if (ctl.signal.aborted) return;
        renderTaskDetail(t);
        updateCard(t);
        if (!ACTIVE.has(t.status)) break;
        wait = QUERY_WAIT_S;
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      $('task-json').textContent = rec ? JSON.stringify(rec, null, 2) : '{}';
      report(e);
    }
  }

  // taskFacts is what a task was asked and what it cost, in words.
  function taskFacts(t) {
    const in_ = t.input || {};
    const parts = [];
    if (in_.num_images) parts.push(`${in_.num_images} image${in_.num_images > 1 ? 's' : ''}`);
    if (in_.output_format) parts.push(in_.output_format + (in_.output_quality ? ` (quality ${in_.output_quality})` : ''));
    if (in_.aspect_ratio) parts.push(in_.aspect_ratio);
    if (in_.image_size) parts.push(in_.image_size);
    if (Array.isArray(in_.image_urls) && in_.image_urls.length) parts.push(`editing ${in_.image_urls.length} image${in_.image_urls.length > 1 ? 's' : ''}`);
    if (typeof t.price === 'number') parts.push(`${fmtNum(t.price)} credits`);
    if (t.start_time && t.create_time) parts.push(`queued ${fmtNum(Math.max(0, t.start_time - t.create_time))} ms`);
    if (t.trace_id) parts.push(`trace ${t.trace_id}`);
    return parts.join(' · ');
  }

  function renderTaskDetail(t) {
    $('task-detail-prompt').textContent = promptOf(t);
    $('task-detail-prompt').hidden = !promptOf(t);
    $('task-detail-facts').textContent = taskFacts(t);
    $('task-json').textContent = JSON.stringify(t, null, 2);
    $('task-cancel').hidden = !ACTIVE.has(t.status);
    const box = $('task-detail-images');
    const urls = t.status === 'completed' && Array.isArray(t.results) ? t.results : [];
    if (box.childElementCount === urls.length) return;
    box.replaceChildren(...urls.map((u, i) => resultFigure(u, i, urls.length, promptOf(t) || `${t.model} result`)));
  }

  function resultFigure(u, i, n, what) {
    const href = safeURL(u);
    const cap = el('figcaption', {}, `Result ${i + 1} of ${n}`);
    if (!href) return el('figure', {}, el('figcaption', {}, `Result ${i + 1}: not an http(s) URL`));
    const img = el('img', { alt: `${what} ${i + 1} of ${n}`, decoding: 'async' });
    img.addEventListener('load', () => { cap.textContent = `Result ${i + 1} of ${n}: ${img.naturalWidth} × ${img.naturalHeight} px`; });
    img.addEventListener('error', () => { cap.textContent = `Result ${i + 1} could not be loaded (the link lasts 24 hours).`; });
    img.src = href;
    return el('figure', {}, el('a', { href, target: '_blank', rel: 'noopener noreferrer' }, img), cap);
  }

  function closeTaskDetail() {
    if (state.detail) {
      state.detail.ctl.abort();
      const li = $('gallery').querySelector(`li[data-task-id="${CSS.escape(state.detail.id)}"] button`);
      state.detail = null;
      markSelected('');
      if (li) li.focus();
    }
    $('task-detail').hidden = true;
  }

  async function loadTaskWebhooks(id, signal) {
    const box = $('task-webhooks');
    try {
      const log = await api.get(`/task/webhooks?task_id=${enc(id)}`, { envelope: false, signal });
      box.replaceChildren(...webhookLog(log));
    } catch (e) {
      if (signal.aborted || e.sessionEnded) return;
      box.replaceChildren(el('p', { class: 'error' }, e.message));
    }
  }

  function webhookLog(log) {
    if (!log || !log.callback_url) return [el('p', { class: 'help' }, 'This task has no callback URL.')];
    const out = [
      el('p', { class: 'wrap' }, 'To ', el('code', { class: 'mono' }, log.callback_url)),
      el('p', { class: 'help' }, `Events: ${(log.events || []).join(', ') || '—'}`),
    ];
    const deliveries = log.deliveries || [];
    if (!deliveries.length) out.push(el('p', { class: 'help' }, 'No deliveries yet.'));
    for (const d of deliveries) {
      const attempts = (d.attempts || []).map((a) => el('li', {},
        el('span', {}, fmtTime(a.time)), ' · ',
        el('span', { class: a.status_code >= 200 && a.status_code < 300 ? 'ok' : 'bad' }, a.status_code ? `HTTP ${a.status_code}` : 'no answer'),
        ` · ${fmtNum(a.latency_ms)} ms`,
        a.error ? el('span', { class: 'muted' }, ` · ${a.error}`) : null));
      out.push(el('div', { class: 'delivery' },
        el('p', {}, el('strong', {}, d.type), ' ', badge(d.state)),
        el('p', { class: 'mono small-text' }, d.webhook_id),
        attempts.length ? el('ol', { class: 'attempts' }, attempts) : el('p', { class: 'help' }, 'Not tried yet.')));
    }
    return out;
  }

  async function cancelTask() {
    if (!state.detail) return;
    const id = state.detail.id;
    const btn = $('task-cancel');
    btn.disabled = true;
    try {
      const r = await api.post('/task/cancel', { task_id: id });
      toast(r && r.refunded ? `Task canceled; ${fmtNum(r.credits_refunded)} credits refunded.` : 'Task canceled (not refunded: it had started).');
      refreshAccount();
      showTaskDetail(id);
    } catch (e) {
      report(e);
    } finally {
      btn.disabled = false;
    }
  }

  // ---- webhook secret -------------------------------------------------------------------------

  let secretShown = false;

  function setSecret(secret) {
    secretShown = !!secret;
    $('webhook-secret').textContent = secret || '••••••••••••••••';
    $('webhook-secret').classList.toggle('masked', !secret);
    $('show-secret').textContent = secret ? 'Hide secret' : 'Show secret';
    $('show-secret').setAttribute('aria-pressed', String(!!secret));
    $('copy-secret').hidden = !secret;
  }

  async function toggleSecret() {
    if (secretShown) {
      setSecret('');
      return;
    }
    try {
      const data = await api.get('/webhook-secret');
      setSecret(data.secret);
    } catch (e) {
      report(e);
    }
  }

  function askRotate() {
    confirmAction($('confirm-dialog'), {
      heading: 'Rotate the signing secret?',
      text: 'A new secret signs deliveries at once. The current one keeps signing beside it for 24 hours, time to update your receiver; rotating again within those 24 hours drops it at once.',
      ok: 'Rotate secret',
      run: async () => {
        const data = await api.post('/webhook-secret/rotate');
        setSecret(data.secret);
        const note = $('rotate-note');
        note.textContent = toDate(data.previous_valid_until)
          ? `Rotated. The previous secret stays valid until ${fmtTime(data.previous_valid_until)}.`
          : 'Rotated.';
        note.hidden = false;
        toast('Webhook secret rotated.');
      },
    });
  }

  // ---- the account's default endpoint and its deliveries ---------------------------------------

  const endpointEvents = () => [...document.querySelectorAll('#endpoint-form input[type=checkbox]')];

  function showEndpoint(data) {
    const url = (data && data.callback_url) || '';
    $('endpoint-url').value = url;
    const evs = url ? data.callback_events : ['task.completed', 'task.failed', 'task.canceled'];
    for (const c of endpointEvents()) c.checked = evs.includes(c.value);
    $('endpoint-state').textContent = url ? 'Tasks without a callback_url send their events to this endpoint.' : 'No endpoint set: tasks without a callback_url send no events.';
    $('endpoint-test').disabled = !url;
    $('endpoint-clear').disabled = !url;
  }

  async function loadEndpoint() {
    try {
      showEndpoint(await api.get('/account/webhook'));
    } catch (e) {
      report(e);
    }
  }

  async function saveEndpoint(ev) {
    ev.preventDefault();
    const events = endpointEvents().filter((c) => c.checked).map((c) => c.value);
    try {
      showEndpoint(await api.put('/account/webhook', { callback_url: $('endpoint-url').value.trim(), callback_events: events }));
      toast('Endpoint saved.');
    } catch (e) {
      report(e);
    }
  }

  async function clearEndpoint() {
    try {
      showEndpoint(await api.del('/account/webhook'));
      toast('Endpoint removed.');
    } catch (e) {
      report(e);
    }
  }

  function answerText(r) {
    if (r.delivered) return `Delivered: HTTP ${r.status_code} in ${fmtNum(r.latency_ms)} ms (${r.webhook_id}).`;
    return `Not delivered: ${r.error || (r.status_code ? `HTTP ${r.status_code}` : 'no answer')} (${r.webhook_id}).`;
  }

  async function testEndpoint() {
    const btn = $('endpoint-test');
    const out = $('endpoint-test-result');
    btn.disabled = true;
    try {
      const r = await api.post('/account/webhook/test');
      out.textContent = `Test event: ${answerText(r)}`;
      out.className = r.delivered ? 'help ok' : 'help bad';
      out.hidden = false;
    } catch (e) {
      report(e);
    } finally {
      btn.disabled = false;
    }
  }

  async function loadDeliveries() {
    try {
      const data = await api.get('/account/webhook/deliveries?limit=100');
      const list = (data && data.deliveries) || [];
      $('deliveries-table').tBodies[0].replaceChildren(...list.map(deliveryRow));
      $('deliveries-empty').hidden = list.length > 0;
    } catch (e) {
      report(e);
    }
  }

  function deliveryRow(d) {
    const attempts = d.attempts || [];
    const last = attempts[attempts.length - 1];
    const answer = !last ? '—' : (last.status_code ? `HTTP ${last.status_code}` : 'no answer') + (last.error ? ` · ${last.error}` : '');
    const again = el('button', { type: 'button', class: 'small' }, 'Redeliver');
    again.addEventListener('click', () => redeliver(d, again));
    return el('tr', { dataset: { webhookId: d.webhook_id } },
      td('Created', fmtTime(attempts.length ? attempts[0].time : null)),
      td('Task', el('code', { class: 'mono small-text' }, d.task_id)),
      td('Event', d.type),
      td('Status', badge(d.state)),
      td('Attempts', fmtNum(attempts.length)),
      td('Last answer', answer),
      td('', again));
  }

  async function redeliver(d, btn) {
    btn.disabled = true;
    try {
      const r = await api.post('/account/webhook/redeliver', { task_id: d.task_id, type: d.type, seq: d.seq });
      toast(`Redelivery: ${answerText(r)}`, r.delivered ? 'info' : 'error');
      loadDeliveries();
    } catch (e) {
      report(e);
    } finally {
      btn.disabled = false;
    }
  }

  // ---- playground -------------------------------------------------------------------------------

  // The playground is the /playground page's own (its form, rendered in
  // the page, and playground.js), on the console's task routes with the
  // session instead of an API key.
  function mountPlayground() {
    window.EaselPlayground.mount({
      id: (part) => (part === 'form' ? 'pg-form' : `pg-${part}`),
      base: `${API}/task`,
      uploads: `${API}/uploads`,
      headers: (write) => (write && state.csrf ? { 'X-CSRF-Token': state.csrf } : {}),
      credentials: 'same-origin',
      onResponse: (resp) => {
        if (resp.status === 401 && state.user) sessionEnded(new APIError(401, 'Your session has ended.'));
      },
      onCreated: refreshAccount,
      onDone: refreshAccount,
    });
  }

  // ---- operator ------------------------------------------------------------------------------------

  async function searchAccounts(reset) {
    // "More" goes on with the query the list was made for
    if (reset) state.opQuery = $('operator-search').value.trim();
    const q = new URLSearchParams({ q: state.opQuery });
    if (!reset && state.opNext) q.set('cursor', state.opNext);
    try {
      const data = await api.get(`/admin/accounts?${q}`);
      const body = $('operator-results').tBodies[0];
      if (reset) body.replaceChildren();
      body.append(...((data && data.accounts) || []).map(accountRow));
      state.opNext = (data && data.next) || '';
      $('operator-more').hidden = !state.opNext;
      $('operator-empty').hidden = body.rows.length > 0;
    } catch (e) {
      report(e);
    }
  }

  function accountRow(a) {
    const open = el('button', { type: 'button', class: 'small', 'aria-label': `Open account ${a.name || a.id}` }, 'Open');
    open.addEventListener('click', () => openAccount(a.id));
    return el('tr', { dataset: { accountId: a.id } },
      rowHead('Name', a.name || '—'),
      td('Id', el('span', { class: 'mono' }, a.id)),
      td('Status', badge(a.status || 'active')),
      td('Credits', fmtNum(a.credits), 'num'),
      td('Created', fmtDate(a.created_at)),
      td('Actions', open, 'cell-actions'));
  }

  async function openAccount(id) {
    try {
      const data = await api.get(`/admin/accounts/${enc(id)}`);
      renderOpAccount(data.account);
      $('op-keys').tBodies[0].replaceChildren(...(data.keys || []).map(opKeyRow));
      $('op-users').tBodies[0].replaceChildren(...(data.users || []).map((u) => el('tr', {},
        rowHead('Email', u.email),
        td('Id', el('span', { class: 'mono' }, u.id)),
        td('Role', u.admin ? 'operator' : 'member'),
        td('Status', badge(u.status || 'active')))));
      const panel = $('operator-detail');
      panel.hidden = false;
      panel.focus({ preventScroll: true });
      panel.scrollIntoView({ block: 'start' });
    } catch (e) {
      report(e);
    }
  }

  // opKeyRow is a key of the account the operator opened: its limits,
  // and Edit and Revoke.
  function opKeyRow(k) {
    const label = k.name || k.prefix;
    const edit = el('button', { type: 'button', class: 'edit small', 'aria-label': `Edit key ${label}`, disabled: k.status === 'revoked' }, 'Edit');
    const revoke = el('button', {
      type: 'button', class: 'revoke small danger-outline', 'aria-label': `Revoke key ${label}`,
      disabled: k.status === 'revoked',
    }, 'Revoke');
    edit.addEventListener('click', () => openOpKey(k));
    revoke.addEventListener('click', () => askOpRevoke(k));
    return el('tr', { dataset: { prefix: k.prefix, status: k.status || '' } },
      ...keyCells(k),
      td('Actions', el('span', { class: 'row-actions' }, edit, revoke), 'cell-actions'));
  }

  function opKeyButton(prefix, cls) {
    return () => $('op-keys').querySelector(`tr[data-prefix="${CSS.escape(prefix)}"] .${cls}:not(:disabled)`)
      || $('op-keys').querySelector(`tr[data-prefix="${CSS.escape(prefix)}"] .${cls}`);
  }

  function replaceOpKeyRow(k) {
    const tr = $('op-keys').querySelector(`tr[data-prefix="${CSS.escape(k.prefix)}"]`);
    if (tr) tr.replaceWith(opKeyRow(k));
  }

  function opKeyPath(k) {
    return `/admin/accounts/${enc(k.account_id || state.opAccount.id)}/keys/${enc(k.prefix)}`;
  }

  function askOpRevoke(k) {
    confirmAction($('revoke-dialog'), {
      text: revokeText(k),
      run: async () => {
        const updated = await api.post(`${opKeyPath(k)}/revoke`);
        replaceOpKeyRow(updated);
        toast(`Key ${k.prefix} revoked.`);
      },
      returnTo: opKeyButton(k.prefix, 'revoke'),
    });
  }

  // openOpKey opens the key editor with the key's name and limits.
  function openOpKey(k) {
    const form = $('op-key-form');
    form.reset();
    form.dataset.prefix = k.prefix;
    form.dataset.accountId = k.account_id || state.opAccount.id;
    $('op-key-prefix').textContent = k.prefix;
    $('op-key-name').value = k.name || '';
    const allowed = new Set(k.models || []);
    $('op-key-models').replaceChildren(...tiers().map((t) => el('label', { class: 'check', for: `op-key-model-${t}` },
      el('input', { type: 'checkbox', id: `op-key-model-${t}`, value: t, checked: allowed.has(t) }), ` ${t}`)));
    $('op-key-ips').value = (k.allowed_ips || []).join('\n');
    const exp = toDate(k.expires_at);
    $('op-key-expires').value = exp ? localDateValue(exp) : '';
    $('op-key-spend-limit').value = Number(k.spend_limit) > 0 ? String(k.spend_limit) : '';
    $('op-key-cache').textContent = keyCacheText('applies the change');
    showError($('op-key-error'), '');
    openDialog($('op-key-dialog'), $('op-key-name'), opKeyButton(k.prefix, 'edit'));
  }

  // onOpKey saves the editor: every field is sent, an empty one removing
  // its limit.
  async function onOpKey(ev) {
    ev.preventDefault();
    const form = $('op-key-form');
    const lim = $('op-key-spend-limit').value;
    if (lim !== '' && !(Number.isInteger(Number(lim)) && Number(lim) > 0)) {
      showError($('op-key-error'), 'The spend limit must be a whole number of credits, 1 or more, or empty for none.');
      $('op-key-spend-limit').focus();
      return;
    }
    const exp = $('op-key-expires').value;
    const body = {
      name: $('op-key-name').value.trim(),
      models: [...document.querySelectorAll('#op-key-models input:checked')].map((c) => c.value),
      allowed_ips: $('op-key-ips').value.split(/[\r\n,]+/).map((x) => x.trim()).filter(Boolean),
      expires_at: exp ? rfc3339(new Date(`${exp}T00:00:00`)) : '',
      spend_limit: lim === '' ? 0 : Number(lim),
    };
    const btn = $('op-key-save');
    btn.disabled = true;
    try {
      const k = await api.patch(`/admin/accounts/${enc(form.dataset.accountId)}/keys/${enc(form.dataset.prefix)}`, body);
      $('op-key-dialog').close();
      replaceOpKeyRow(k);
      toast(`Key ${k.prefix} saved.`);
    } catch (e) {
      if (!e.sessionEnded) showError($('op-key-error'), e.message);
    } finally {
      btn.disabled = false;
    }
  }

  function renderOpAccount(a) {
    state.opAccount = a;
    $('op-heading').textContent = a.name || a.id;
    renderFacts($('op-facts'), [
      ['Id', el('span', { class: 'mono' }, a.id)],
      ['Status', badge(a.status || 'active')],
      ['Credits', fmtNum(a.credits)],
      ['Models', a.models && a.models.length ? a.models.join(', ') : 'all'],
      ['Creates', limitText(a.rate_limit, ' / s per key')],
      ['Queries', limitText(a.query_rate_limit, ' / s per key')],
      ['In flight', limitText(a.max_inflight, ' tasks')],
      ['Weight', Number(a.weight) > 0 ? fmtNum(a.weight) : 'default (1)'],
      ['Created', fmtTime(a.created_at)],
    ]);
    const disabled = a.status === 'disabled';
    const toggle = $('op-toggle-status');
    toggle.textContent = disabled ? 'Enable account' : 'Disable account';
    toggle.className = disabled ? '' : 'danger-outline';
    for (const [field, key] of [['op-rate-limit', 'rate_limit'], ['op-query-rate-limit', 'query_rate_limit'],
      ['op-max-inflight', 'max_inflight'], ['op-weight', 'weight']]) {
      $(field).value = Number(a[key]) > 0 ? String(a[key]) : '';
    }
    const allowed = new Set(a.models || []);
    $('op-models').replaceChildren(...tiers().map((t) => el('label', { class: 'check', for: `op-model-${t}` },
      el('input', { type: 'checkbox', id: `op-model-${t}`, value: t, checked: allowed.has(t) }), ` ${t}`)));
    const row = $('operator-results').querySelector(`tr[data-account-id="${CSS.escape(a.id)}"]`);
    if (row) row.replaceWith(accountRow(a));
    if (state.user && a.id === state.user.account_id) refreshAccount();
  }

  async function onCredits(ev) {
    ev.preventDefault();
    const a = state.opAccount;
    const amount = Number($('op-amount').value);
    if (!a || !Number.isInteger(amount) || amount === 0) {
      toast('The amount must be a whole number other than 0.', 'error');
      return;
    }
    try {
      const r = await api.post(`/admin/accounts/${enc(a.id)}/credits`, { amount, note: $('op-note').value.trim() });
      toast(`${fmtSigned(amount)} credits for ${a.name || a.id}: balance now ${fmtNum(r.balance)}.`);
      $('op-credits-form').reset();
      renderOpAccount({ ...a, credits: r.balance });
    } catch (e) {
      report(e);
    }
  }

  async function onLimits(ev) {
    ev.preventDefault();
    const a = state.opAccount;
    if (!a) return;
    const num = (id) => ($(id).value === '' ? 0 : Number($(id).value));
    const body = {
      rate_limit: num('op-rate-limit'),
      query_rate_limit: num('op-query-rate-limit'),
      max_inflight: num('op-max-inflight'),
      weight: num('op-weight'),
      models: [...document.querySelectorAll('#op-models input:checked')].map((c) => c.value),
    };
    try {
      renderOpAccount(await api.patch(`/admin/accounts/${enc(a.id)}/limits`, body));
      toast(`Limits of ${a.name || a.id} saved.`);
    } catch (e) {
      report(e);
    }
  }

  function onToggleStatus() {
    const a = state.opAccount;
    if (!a) return;
    const set = async (verb) => {
      renderOpAccount(await api.post(`/admin/accounts/${enc(a.id)}/${verb}`));
      toast(`Account ${a.name || a.id} ${verb}d.`);
    };
    if (a.status === 'disabled') {
      set('enable').catch(report);
      return;
    }
    confirmAction($('confirm-dialog'), {
      heading: 'Disable the account?',
      text: `Every key of “${a.name || a.id}” is refused (403) until the account is enabled again. Its tasks already queued still run.`,
      ok: 'Disable account',
      run: () => set('disable'),
    });
  }

  // ---- upstreams (operator) -----------------------------------------------------------------------

  const BREAKER_TEXT = { closed: 'closed', open: 'open', half: 'half-open' };
  // OUTCOMES are the outcomes of a call other than success (pkg/upstream).
  const OUTCOMES = new Set(['failure', 'throttled', 'refused', 'final']);

  async function loadUpstreams() {
    const btn = $('upstreams-refresh');
    btn.disabled = true;
    try {
      const data = await api.get('/admin/upstreams');
      const list = (data && Array.isArray(data.upstreams)) ? data.upstreams : [];
      $('upstreams-table').tBodies[0].replaceChildren(...list.map(upstreamRow));
      showUpstreamsFile(data && data.file);
      $('upstreams-wrap').hidden = list.length === 0;
      $('upstreams-empty').hidden = list.length > 0;
      $('upstreams-updated').textContent = `Read at ${dateTimeFmt.format(new Date())}.`;
    } catch (e) {
      report(e);
    } finally {
      btn.disabled = false;
    }
  }

  // showUpstreamsFile says which file the pool was loaded from and when,
  // and a change of it the workers refused since: the pool shown is then
  // the one loaded before.
  function showUpstreamsFile(f) {
    const p = $('upstreams-file');
    p.hidden = !f;
    p.classList.toggle('neg', !!(f && f.refused_at));
    if (!f) return;
    const parts = [`File ${f.path || '—'}, loaded at `, fmtShort(f.loaded_at), '.'];
    if (f.refused_at) {
      parts.push(' A change was refused at ', fmtShort(f.refused_at), `: ${f.refusal || 'no reason recorded'}. The pool below is the one loaded before.`);
    }
    p.replaceChildren(...parts);
  }

  // sub is a second, smaller line of a cell.
  function sub(text) {
    return el('span', { class: 'sub' }, text);
  }

  function upstreamRow(u) {
    const br = BREAKER_TEXT[u.breaker] ? u.breaker : 'closed';
    // The breaker's words are the workers' (upstream.Status.BreakerText),
    // as easelctl upstream list shows them.
    const breaker = [badge(BREAKER_TEXT[br], `breaker-${br}`)];
    if (u.breaker_text && u.breaker_text !== BREAKER_TEXT[br]) breaker.push(sub(u.breaker_text));
    const fails = Number(u.failures_in_a_row) || 0;
    if (fails > 0) breaker.push(sub(`${fmtNum(fails)} failure${fails === 1 ? '' : 's'} in a row`));

    const limits = [];
    if (Number(u.rpm) > 0) limits.push(`${fmtNum(u.rpm)} rpm`);
    if (Number(u.concurrency) > 0) {
      // The part of its concurrency in use now, when the workers report it.
      const used = u.in_flight == null ? '' : `${fmtNum(u.in_flight)}/`;
      limits.push(`${used}${fmtNum(u.concurrency)} at once`);
    }

    const errs = Object.entries(u.errors_last_minute || {}).filter(([, n]) => Number(n) > 0)
      .sort((a, b) => Number(b[1]) - Number(a[1]) || a[0].localeCompare(b[0]));
    const errTotal = errs.reduce((s, [, n]) => s + Number(n), 0);
    const errCell = [fmtNum(errTotal)];
    if (errs.length) errCell.push(sub(errs.map(([k, n]) => `${k} ${fmtNum(n)}`).join(', ')));
    const errsEver = Object.values(u.errors_total || {}).reduce((s, n) => s + (Number(n) || 0), 0);
    errCell.push(sub(`${fmtNum(errsEver)} in all`));

    const recent = Array.isArray(u.recent_errors) ? u.recent_errors : [];
    const newest = recent[0];
    let newestCell = '—';
    if (newest) {
      const msg = String(newest.message || '');
      newestCell = el('span', { class: 'up-error' },
        el('span', { class: 'up-error-head' }, badge(newest.outcome || 'error', `outcome-${OUTCOMES.has(newest.outcome) ? newest.outcome : 'failure'}`), ' ', fmtShort(newest.time)),
        msg ? el('span', { class: 'up-error-msg', title: msg }, msg) : null,
        recent.length > 1 ? sub(`${fmtNum(recent.length)} recent errors`) : null);
    }

    const provider = [u.provider || '—'];
    if (u.host) provider.push(el('span', { class: 'sub mono up-host' }, u.host));

    return el('tr', { dataset: { upstream: u.name || '', breaker: br } },
      rowHead('Name', [el('span', {}, u.name || '—'), u.credential ? el('span', { class: 'sub mono', title: 'The credential\'s fingerprint' }, u.credential) : null]),
      td('Provider', provider),
      td('Weight', [Number(u.weight) > 0 ? fmtNum(u.weight) : '1', limits.length ? sub(limits.join(', ')) : null], 'num'),
      td('Models', u.models && u.models.length ? u.models.join(', ') : 'all'),
      td('Breaker', breaker),
      td('Cooling until', fmtShort(u.cooling_until)),
      td('Disabled', u.disabled ? badge('disabled', 'disabled') : 'no'),
      td('Calls 60 s / all', `${fmtNum(u.calls_last_minute || 0)} / ${fmtNum(u.calls_total || 0)}`, 'num'),
      td('Errors 60 s', errCell, `num${errTotal > 0 ? ' neg' : ''}`),
      td('Newest error', newestCell, 'up-newest'));
  }

  // ---- start ------------------------------------------------------------------------------------------

  function bind() {
    $('signin-form').addEventListener('submit', onSignin);
    $('signout').addEventListener('click', signOut);
    window.addEventListener('hashchange', () => route());
    document.querySelector('.skip').addEventListener('click', (ev) => {
      ev.preventDefault();
      $('main').focus();
    });
    // every dialog's Cancel button
    for (const b of document.querySelectorAll('.dialog-close')) {
      b.addEventListener('click', () => b.closest('dialog').close());
    }

    $('new-key').addEventListener('click', openKeyDialog);
    $('key-form').addEventListener('submit', onCreateKey);
    // Enter submits from any field but the textarea (where it starts a new
    // line); browsers do not submit on Enter in a checkbox by themselves.
    $('key-form').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.isComposing && ev.target instanceof HTMLInputElement && ev.target.type === 'checkbox') {
        ev.preventDefault();
        $('key-form').requestSubmit();
      }
    });
    $('key-copy').addEventListener('click', async () => {
      $('key-copy-status').textContent = await copyText($('key-secret').textContent, $('key-secret'));
    });
    $('key-done').addEventListener('click', () => $('secret-dialog').close());
    $('rename-form').addEventListener('submit', onRename);

    $('usage-days').addEventListener('change', loadUsage);
    $('usage-key').addEventListener('change', loadUsage);
    $('ledger-more').addEventListener('click', () => loadLedger(false));
    let pending = 0;
    new ResizeObserver(() => {
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(drawUsage);
    }).observe($('usage-chart-box'));

    $('filter-status').addEventListener('change', () => loadTasks(true));
    $('filter-model').addEventListener('change', () => loadTasks(true));
    $('tasks-refresh').addEventListener('click', () => loadTasks(true));
    $('gallery-more').addEventListener('click', () => loadTasks(false));
    $('task-close').addEventListener('click', closeTaskDetail);
    $('task-cancel').addEventListener('click', cancelTask);

    $('show-secret').addEventListener('click', toggleSecret);
    $('copy-secret').addEventListener('click', async () => toast(await copyText($('webhook-secret').textContent, $('webhook-secret'))));
    $('rotate-secret').addEventListener('click', askRotate);
    $('endpoint-form').addEventListener('submit', saveEndpoint);
    $('endpoint-test').addEventListener('click', testEndpoint);
    $('endpoint-clear').addEventListener('click', clearEndpoint);
    $('deliveries-refresh').addEventListener('click', loadDeliveries);

    mountPlayground();

    $('operator-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      searchAccounts(true);
    });
    $('operator-more').addEventListener('click', () => searchAccounts(false));
    $('op-credits-form').addEventListener('submit', onCredits);
    $('op-limits-form').addEventListener('submit', onLimits);
    $('op-key-form').addEventListener('submit', onOpKey);
    $('op-toggle-status').addEventListener('click', onToggleStatus);
    $('upstreams-refresh').addEventListener('click', loadUpstreams);
  }

  async function start() {
    bind();
    try {
      const data = await api.get('/session', { session: true });
      await signedIn(data);
    } catch (e) {
      // 401: not signed in, the usual case; anything else is worth saying.
      showSignin(e.status === 401 ? '' : e.message);
    }
  }

  start();
})();
