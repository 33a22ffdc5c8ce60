// Easel playground: plain JavaScript, no framework, no build step. It calls
// only the public API of the origin that served it:
//   POST /v1/task/create            (Bearer)
//   GET  /v1/task/stream?task_id=   (Bearer; Server-Sent Events read with
//                                    fetch, since EventSource cannot send an
//                                    Authorization header)
//   GET  /v1/task/query?task_id=    (Bearer; only if the stream cannot be
//                                    read or ends before the task does)
'use strict';

(() => {
  const FINAL = new Set(['completed', 'failed', 'canceled']);
  // The API key is kept in sessionStorage: it lasts as long as the tab and
  // is never written to disk for later sessions, which is enough for trying
  // the API and leaves no secret behind. "Remember on this device" moves it
  // to localStorage, at the user's choice.
  const KEY_ITEM = 'easel.playground.apiKey';
  const POLL_PAUSE_MS = 1000;
  const QUERY_WAIT_S = 20;

  const $ = (id) => document.getElementById(id);
  const els = {
    form: $('create-form'),
    key: $('api-key'),
    showKey: $('show-key'),
    remember: $('remember-key'),
    model: $('model'),
    prompt: $('prompt'),
    ratio: $('aspect-ratio'),
    sizeField: $('image-size-field'),
    size: $('image-size'),
    urls: $('image-urls'),
    submit: $('submit'),
    copy: $('copy-curl'),
    copyStatus: $('copy-status'),
    curl: $('curl'),
    task: $('task'),
    taskID: $('task-id'),
    progress: $('progress'),
    status: $('status'),
    error: $('error'),
    results: $('results'),
    json: $('task-json'),
  };

  // ---- the API key -------------------------------------------------------

  function storage(kind) {
    try {
      return kind === 'local' ? window.localStorage : window.sessionStorage;
    } catch {
      return null; // storage refused (a privacy setting): the key lives in the field only
    }
  }

  function loadKey() {
    const local = storage('local');
    const session = storage('session');
    const remembered = local ? local.getItem(KEY_ITEM) : null;
    els.remember.checked = remembered !== null;
    els.key.value = (session && session.getItem(KEY_ITEM)) || remembered || '';
  }

  function saveKey() {
    const key = els.key.value.trim();
    const local = storage('local');
    const session = storage('session');
    try {
      if (session) {
        if (key) session.setItem(KEY_ITEM, key);
        else session.removeItem(KEY_ITEM);
      }
      if (local) {
        if (key && els.remember.checked) local.setItem(KEY_ITEM, key);
        else local.removeItem(KEY_ITEM);
      }
    } catch {
      // quota or privacy refusal: nothing to keep
    }
  }

  // ---- the request ---------------------------------------------------------

  function selectedModel() {
    return els.model.options[els.model.selectedIndex] || null;
  }

  function takesImageSize() {
    const opt = selectedModel();
    return !!opt && opt.dataset.imageSize === 'true';
  }

  function sourceURLs() {
    return els.urls.value.split(/\r?\n/).map((s) => s.trim()).filter((s) => s !== '');
  }

  // createBody is the body of POST /v1/task/create for the form as it is.
  function createBody() {
    const input = { prompt: els.prompt.value };
    if (els.ratio.value) input.aspect_ratio = els.ratio.value;
    if (takesImageSize()) input.image_size = els.size.value;
    const urls = sourceURLs();
    if (urls.length > 0) input.image_urls = urls;
    return JSON.stringify({ model: els.model.value, task_type: 'image', input });
  }

  function shellQuote(s) {
    return "'" + s.replace(/'/g, "'\\''") + "'";
  }

  // curlFor is the create request as a curl command, the key left to the
  // shell's $EASEL_API_KEY.
  function curlFor(body) {
    return [
      'curl -sS -X POST ' + shellQuote(new URL('/v1/task/create', location.origin).href) + ' \\',
      '  -H "Authorization: Bearer $EASEL_API_KEY" \\',
      "  -H 'Content-Type: application/json' \\",
      '  -d ' + shellQuote(body),
    ].join('\n');
  }

  function refreshForm() {
    els.sizeField.hidden = !takesImageSize();
    els.size.disabled = !takesImageSize();
    els.curl.textContent = curlFor(createBody());
  }

  async function copyCurl() {
    const text = curlFor(createBody());
    els.curl.textContent = text;
    let copied = false;
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        copied = true;
      } catch {
        copied = false;
      }
    }
    if (!copied) {
      // Older browsers, or a page served over plain http to another host:
      // select the command and let the browser copy the selection.
      const details = els.curl.closest('details');
      if (details) details.open = true;
      const range = document.createRange();
      range.selectNodeContents(els.curl);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      try {
        copied = document.execCommand('copy');
      } catch {
        copied = false;
      }
    }
    els.copyStatus.textContent = copied ? 'Copied.' : 'Selected: press Ctrl+C (⌘C) to copy.';
  }

  // ---- talking to the API ----------------------------------------------

  // APIError is an error answer of the API: {"code","msg","data":null}.
  class APIError extends Error {
    constructor(status, statusText, body, retryAfter) {
      const msg = body && typeof body.msg === 'string' && body.msg ? body.msg : statusText || 'request failed';
      let text = `${status} ${statusText ? statusText + ': ' : ''}${msg}`;
      if (retryAfter) text += ` (retry after ${retryAfter} s)`;
      super(text);
      this.status = status;
      this.apiMessage = msg;
    }
  }

  async function readJSON(resp) {
    const text = await resp.text();
    try {
      return JSON.parse(text);
    } catch {
      return { msg: text.trim().slice(0, 500) };
    }
  }

  async function apiError(resp) {
    return new APIError(resp.status, resp.statusText, await readJSON(resp), resp.headers.get('Retry-After'));
  }

  function authHeaders(key) {
    return { Authorization: 'Bearer ' + key };
  }

  async function createTask(key, body, signal) {
    const resp = await fetch('/v1/task/create', {
      method: 'POST',
      headers: { ...authHeaders(key), 'Content-Type': 'application/json' },
      body,
      signal,
      cache: 'no-store',
    });
    if (!resp.ok) throw await apiError(resp);
    const reply = await readJSON(resp);
    const id = reply && reply.data && reply.data.task_id;
    if (typeof id !== 'string' || id === '') throw new Error('the create answer had no task_id');
    return id;
  }

  // SSEParser reads a text/event-stream: lines ending in \n, \r\n or \r;
  // "field: value" lines; a blank line ends an event; ":" lines are
  // comments (the server's keepalives).
  class SSEParser {
    constructor(onEvent) {
      this.onEvent = onEvent;
      this.buf = '';
      this.reset();
    }

    reset() {
      this.event = '';
      this.data = [];
      this.hasData = false;
    }

    push(text) {
      this.buf += text;
      // A \r at the very end may be the first half of a \r\n still coming.
      const re = /\r\n|\n|\r(?!$)/g;
      let start = 0;
      let m;
      while ((m = re.exec(this.buf)) !== null) {
        this.line(this.buf.slice(start, m.index));
        start = re.lastIndex;
      }
      this.buf = this.buf.slice(start);
    }

    line(l) {
      if (l === '') {
        if (this.hasData) this.onEvent({ event: this.event || 'message', data: this.data.join('\n'), id: this.id });
        this.reset();
        return;
      }
      if (l.startsWith(':')) return;
      const i = l.indexOf(':');
      const field = i < 0 ? l : l.slice(0, i);
      let value = i < 0 ? '' : l.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') this.event = value;
      else if (field === 'data') {
        this.data.push(value);
        this.hasData = true;
      } else if (field === 'id') this.id = value;
    }
  }

  // streamTask follows the task on GET /v1/task/stream until a final record
  // or the end of the stream, and returns the last record read.
  async function streamTask(id, key, signal, onRecord) {
    const resp = await fetch(`/v1/task/stream?task_id=${encodeURIComponent(id)}`, {
      headers: { ...authHeaders(key), Accept: 'text/event-stream' },
      signal,
      cache: 'no-store',
    });
    if (!resp.ok) throw await apiError(resp);
    const ctype = resp.headers.get('Content-Type') || '';
    if (!ctype.startsWith('text/event-stream') || !resp.body) {
      throw new Error('the stream answered ' + (ctype || 'no Content-Type'));
    }
    let last = null;
    const parser = new SSEParser((ev) => {
      if (ev.event !== 'task') return;
      let rec;
      try {
        rec = JSON.parse(ev.data);
      } catch {
        return;
      }
      last = rec;
      onRecord(rec, 'stream');
    });
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
        if (last && FINAL.has(last.status)) break;
      }
    } finally {
      reader.cancel().catch(() => {});
    }
    return last;
  }

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        reject(signal.reason);
      }, { once: true });
    });
  }

  // pollTask follows the task on GET /v1/task/query (long-polling with wait)
  // until it is final.
  async function pollTask(id, key, signal, onRecord) {
    for (;;) {
      const resp = await fetch(`/v1/task/query?task_id=${encodeURIComponent(id)}&wait=${QUERY_WAIT_S}`, {
        headers: authHeaders(key),
        signal,
        cache: 'no-store',
      });
      if (!resp.ok) throw await apiError(resp);
      const rec = await readJSON(resp);
      onRecord(rec, 'poll');
      if (FINAL.has(rec.status)) return rec;
      await sleep(POLL_PAUSE_MS, signal);
    }
  }

  // streamUsable tells an error of the stream after which polling may still
  // work (the route missing on an older gateway, a dropped connection) from
  // one that polling would meet too (a bad key, an unknown task).
  function streamUsable(err) {
    if (!(err instanceof APIError)) return true;
    return err.status === 405 || (err.status === 404 && err.apiMessage === 'no such endpoint') || err.status >= 500;
  }

  async function followTask(id, key, signal, onRecord) {
    try {
      const last = await streamTask(id, key, signal, onRecord);
      if (last && FINAL.has(last.status)) return;
      note('The task stream ended before the task did; following it by polling.');
    } catch (err) {
      if (signal.aborted) throw err;
      if (!streamUsable(err)) throw err;
      note('The task stream could not be read (' + err.message + '); following the task by polling.');
    }
    els.task.dataset.source = 'poll';
    await pollTask(id, key, signal, onRecord);
  }

  // ---- showing the task ----------------------------------------------------

  function note(text) {
    els.status.dataset.note = text;
  }

  function showError(text) {
    els.error.textContent = text;
    els.error.hidden = false;
  }

  function clearOutput() {
    els.error.hidden = true;
    els.error.textContent = '';
    els.results.replaceChildren();
    els.progress.value = 0;
    els.progress.textContent = '0 %';
    els.json.textContent = '{}';
    els.taskID.textContent = 'No task yet.';
    els.task.dataset.status = '';
    els.task.dataset.source = '';
    delete els.status.dataset.note;
  }

  function describe(rec) {
    const pct = Math.max(0, Math.min(100, Number(rec.progress) || 0));
    let text = `${rec.status} — ${pct}\u00a0%`;
    if (rec.status === 'pending') {
      if (Number.isInteger(rec.queue_position)) text += ` — position ${rec.queue_position} in the queue`;
      if (Number.isInteger(rec.eta_ms)) text += `, starting in about ${Math.max(1, Math.round(rec.eta_ms / 1000))} s`;
    }
    return { pct, text };
  }

  function safeURL(u) {
    try {
      const url = new URL(u, location.href);
      return url.protocol === 'https:' || url.protocol === 'http:' ? url.href : null;
    } catch {
      return null;
    }
  }

  function showResults(rec) {
    const urls = Array.isArray(rec.results) ? rec.results : [];
    if (els.results.childElementCount === urls.length) return;
    const prompt = els.prompt.value.trim().slice(0, 120);
    const figures = urls.map((u, i) => {
      const href = safeURL(u);
      const fig = document.createElement('figure');
      const cap = document.createElement('figcaption');
      if (!href) {
        cap.textContent = `Result ${i + 1}: not an http(s) URL`;
        fig.append(cap);
        return fig;
      }
      const link = document.createElement('a');
      link.href = href;
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      const img = document.createElement('img');
      img.alt = `Result ${i + 1} of ${urls.length}: ${prompt}`;
      img.decoding = 'async';
      img.addEventListener('load', () => {
        cap.textContent = `Result ${i + 1} of ${urls.length}: ${img.naturalWidth} × ${img.naturalHeight} px (opens the signed URL, valid 24 h)`;
      });
      img.addEventListener('error', () => {
        cap.textContent = `Result ${i + 1} could not be loaded.`;
        showError(`The result image ${i + 1} could not be loaded from ${href.split('?')[0]}.`);
      });
      img.src = href;
      link.append(img);
      cap.textContent = `Result ${i + 1} of ${urls.length}: loading…`;
      fig.append(link, cap);
      return fig;
    });
    els.results.replaceChildren(...figures);
  }

  function render(rec, source) {
    if (!rec || typeof rec !== 'object') return;
    const { pct, text } = describe(rec);
    els.task.dataset.status = rec.status || '';
    if (source) els.task.dataset.source = source;
    els.progress.value = pct;
    els.progress.textContent = `${pct} %`;
    els.status.textContent = els.status.dataset.note ? `${text} (${els.status.dataset.note})` : text;
    els.json.textContent = JSON.stringify(rec, null, 2);
    if (rec.status === 'completed') showResults(rec);
    if (rec.status === 'failed') {
      const e = rec.error || {};
      showError(`The task failed: ${e.code || 'unknown'}${e.message ? ' — ' + e.message : ''}`);
    }
    if (rec.status === 'canceled') showError('The task was canceled.');
  }

  // ---- the form ------------------------------------------------------------

  let running = null; // the AbortController of the task being followed

  async function onSubmit(ev) {
    ev.preventDefault();
    if (!els.form.reportValidity()) return;
    const key = els.key.value.trim();
    if (!key) return;
    saveKey();
    if (running) running.abort();
    const ctl = new AbortController();
    running = ctl;
    clearOutput();
    const body = createBody();
    els.curl.textContent = curlFor(body);
    els.submit.disabled = true;
    els.status.textContent = 'Creating the task…';
    try {
      const id = await createTask(key, body, ctl.signal);
      els.taskID.textContent = id;
      els.status.textContent = 'Created; waiting for the first update…';
      await followTask(id, key, ctl.signal, render);
    } catch (err) {
      if (ctl.signal.aborted) return;
      els.status.textContent = 'The request failed.';
      showError(err instanceof APIError ? err.message : 'Network error: ' + (err && err.message ? err.message : String(err)));
    } finally {
      if (running === ctl) {
        running = null;
        els.submit.disabled = false;
      }
    }
  }

  function init() {
    loadKey();
    refreshForm();
    els.form.addEventListener('submit', onSubmit);
    els.form.addEventListener('input', refreshForm);
    els.form.addEventListener('change', refreshForm);
    els.key.addEventListener('change', saveKey);
    els.remember.addEventListener('change', saveKey);
    els.showKey.addEventListener('click', () => {
      const show = els.key.type === 'password';
      els.key.type = show ? 'text' : 'password';
      els.showKey.textContent = show ? 'Hide' : 'Show';
      els.showKey.setAttribute('aria-pressed', String(show));
    });
    els.copy.addEventListener('click', copyCurl);
  }

  init();
})();
