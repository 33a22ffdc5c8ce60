// Easel playground: the form that creates an image task and follows it to
// its result. Plain JavaScript, no framework, no build step. Two pages run
// it: the /playground page (the public API with an API key) and the
// console's playground section (the console's task routes with the
// signed-in session). It talks to its own origin only:
//   POST <base>/create             the task
//   GET  <base>/stream?task_id=    Server-Sent Events read with fetch,
//                                  since EventSource cannot send an
//                                  Authorization header
//   GET  <base>/query?task_id=     only if the stream cannot be read or
//                                  ends before the task does
//   POST <base>/cancel             the console's Cancel button
//   POST <uploads>                 a source image from a local file
//                                  (multipart, its "file" field), whose
//                                  URL then goes in the image URLs
//
// Text from the server is only ever put in the page with textContent.
'use strict';

window.EaselPlayground = (() => {
  const FINAL = new Set(['completed', 'failed', 'canceled']);
  const POLL_PAUSE_MS = 1000;
  const QUERY_WAIT_S = 20;

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

  // readJSON reads a body as JSON; one that is not is its text, as msg.
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

  function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        reject(signal.reason);
      }, { once: true });
    });
  }

  // safeURL is u resolved, if it is an http(s) URL; else null.
  function safeURL(u) {
    try {
      const url = new URL(u, location.href);
      return url.protocol === 'https:' || url.protocol === 'http:' ? url.href : null;
    } catch {
      return null;
    }
  }

  // streamUsable tells an error of the stream after which polling may still
  // work (the route missing on an older gateway, a dropped connection) from
  // one that polling would meet too (a bad key, an unknown task).
  function streamUsable(err) {
    if (!(err instanceof APIError)) return true;
    return err.status === 405 || (err.status === 404 && err.apiMessage === 'no such endpoint') || err.status >= 500;
  }

  // mount runs the playground on a page's form. opts:
  //   id(part)        the element id of a part of the playground: form,
  //                   model, prompt, aspect-ratio, image-size-field,
  //                   image-size, image-urls, submit, cancel, task,
  //                   task-id, progress, status, error, results, task-json,
  //                   upload, image-files, upload-status, upload-error,
  //                   uploads (image-urls, the upload parts, cancel and
  //                   task-json may be missing)
  //   base            the task routes' path: /v1/task, /console/api/task
  //   uploads         the uploads route: /v1/uploads, /console/api/uploads
  //                   (missing: no uploading)
  //   headers(write)  the headers that authenticate a request (a write:
  //                   a create or a cancel)
  //   credentials     fetch's credentials mode (the console's cookie)
  //   ready()         false to send nothing (no API key yet)
  //   onResponse(r)   sees every response (the console's end of session)
  //   onCreated(id), onDone()  a task was created; its following ended
  // It returns { createBody, refresh }: the create request's body for the
  // form as it is, and a refresh of the form after its options change.
  function mount(opts) {
    const part = (name) => document.getElementById(opts.id(name));
    const els = {
      form: part('form'),
      model: part('model'),
      prompt: part('prompt'),
      ratio: part('aspect-ratio'),
      sizeField: part('image-size-field'),
      size: part('image-size'),
      urls: part('image-urls'),
      format: part('output-format'),
      count: part('num-images'),
      submit: part('submit'),
      cancel: part('cancel'),
      task: part('task'),
      taskID: part('task-id'),
      progress: part('progress'),
      status: part('status'),
      error: part('error'),
      results: part('results'),
      json: part('task-json'),
      upload: part('upload'),
      files: part('image-files'),
      uploadStatus: part('upload-status'),
      uploadError: part('upload-error'),
      uploads: part('uploads'),
    };
    let running = null; // the AbortController of the task being followed
    let uploading = 0; // the uploads under way

    // send is every request of the playground: to url, authenticated by
    // the page, with the headers given besides.
    async function send(method, url, body, signal, headers) {
      const resp = await fetch(url, {
        method, headers: { ...opts.headers(method !== 'GET'), ...headers }, body, signal,
        cache: 'no-store', credentials: opts.credentials || 'same-origin',
      });
      if (opts.onResponse) opts.onResponse(resp);
      if (!resp.ok) throw await apiError(resp);
      return resp;
    }

    // call is a request of the task routes, its body JSON.
    function call(method, path, body, signal, accept) {
      const headers = {};
      if (accept) headers.Accept = accept;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      return send(method, opts.base + path, body, signal, headers);
    }

    // ---- the request -------------------------------------------------------

    function selectedModel() {
      return els.model.options[els.model.selectedIndex] || null;
    }

    function takesImageSize() {
      const opt = selectedModel();
      return !!opt && opt.dataset.imageSize === 'true';
    }

    function sourceURLs() {
      if (!els.urls) return [];
      return els.urls.value.split(/\r?\n/).map((s) => s.trim()).filter((s) => s !== '');
    }

    // createBody is the body of a create for the form as it is.
    function createBody() {
      const input = { prompt: els.prompt.value };
      if (els.ratio.value) input.aspect_ratio = els.ratio.value;
      if (takesImageSize()) input.image_size = els.size.value;
      if (els.format && els.format.value && els.format.value !== 'png') input.output_format = els.format.value;
      if (els.count && Number(els.count.value) > 1) input.num_images = Number(els.count.value);
      const urls = sourceURLs();
      if (urls.length > 0) input.image_urls = urls;
      return JSON.stringify({ model: els.model.value, task_type: 'image', input });
    }

    function refresh() {
      els.sizeField.hidden = !takesImageSize();
      els.size.disabled = !takesImageSize();
    }

    async function createTask(body, signal) {
      const reply = await readJSON(await call('POST', '/create', body, signal));
      const id = reply && reply.data && reply.data.task_id;
      if (typeof id !== 'string' || id === '') throw new Error('the create answer had no task_id');
      return id;
    }

    // ---- following the task ------------------------------------------------

    // streamTask follows the task on the stream until a final record or
    // the end of the stream, and returns the last record read.
    async function streamTask(id, signal, onRecord) {
      const resp = await call('GET', `/stream?task_id=${encodeURIComponent(id)}`, undefined, signal, 'text/event-stream');
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

    // pollTask follows the task on the query (long-polling with wait)
    // until it is final.
    async function pollTask(id, signal, onRecord) {
      for (;;) {
        const resp = await call('GET', `/query?task_id=${encodeURIComponent(id)}&wait=${QUERY_WAIT_S}`, undefined, signal);
        const rec = await readJSON(resp);
        onRecord(rec, 'poll');
        if (FINAL.has(rec.status)) return rec;
        await sleep(POLL_PAUSE_MS, signal);
      }
    }

    async function followTask(id, signal, onRecord) {
      try {
        const last = await streamTask(id, signal, onRecord);
        if (last && FINAL.has(last.status)) return;
        note('The task stream ended before the task did; following it by polling.');
      } catch (err) {
        if (signal.aborted) throw err;
        if (!streamUsable(err)) throw err;
        note('The task stream could not be read (' + err.message + '); following the task by polling.');
      }
      els.task.dataset.source = 'poll';
      await pollTask(id, signal, onRecord);
    }

    // ---- showing the task --------------------------------------------------

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
      if (els.json) els.json.textContent = '{}';
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
      if (els.json) els.json.textContent = JSON.stringify(rec, null, 2);
      if (rec.status === 'completed') showResults(rec);
      if (rec.status === 'failed') {
        const e = rec.error || {};
        showError(`The task failed: ${e.code || 'unknown'}${e.message ? ' — ' + e.message : ''}`);
      }
      if (rec.status === 'canceled') showError('The task was canceled.');
    }

    // ---- the form ------------------------------------------------------------

    // The form is not sent while an upload is under way: its URL is not
    // in the list yet.
    function updateSubmit() {
      els.submit.disabled = running !== null || uploading > 0;
    }

    async function onSubmit(ev) {
      ev.preventDefault();
      if (uploading > 0) return;
      if (!els.form.reportValidity()) return;
      if (opts.ready && !opts.ready()) return;
      if (running) running.abort();
      const ctl = new AbortController();
      running = ctl;
      clearOutput();
      updateSubmit();
      els.status.textContent = 'Creating the task…';
      try {
        const id = await createTask(createBody(), ctl.signal);
        els.taskID.textContent = id;
        if (els.cancel) {
          els.cancel.dataset.taskId = id;
          els.cancel.hidden = false;
        }
        if (opts.onCreated) opts.onCreated(id);
        els.status.textContent = 'Created; waiting for the first update…';
        await followTask(id, ctl.signal, render);
        if (opts.onDone) opts.onDone();
      } catch (err) {
        if (ctl.signal.aborted) return;
        els.status.textContent = 'The request failed.';
        showError(err instanceof APIError ? err.message : 'Network error: ' + (err && err.message ? err.message : String(err)));
      } finally {
        if (running === ctl) {
          running = null;
          updateSubmit();
          if (els.cancel) els.cancel.hidden = true;
        }
      }
    }

    async function onCancel() {
      const id = els.cancel.dataset.taskId;
      if (!id) return;
      els.cancel.disabled = true;
      try {
        await call('POST', '/cancel', JSON.stringify({ task_id: id }));
        // the stream sees the change and ends the following
      } catch (err) {
        showError(err.message);
      } finally {
        els.cancel.disabled = false;
      }
    }

    // ---- uploading source images -------------------------------------------

    function formatBytes(n) {
      if (n < 1024) return `${n} B`;
      if (n < 1024 * 1024) return `${Math.round(n / 1024)} kB`;
      return `${(n / (1024 * 1024)).toFixed(1)} MB`;
    }

    function showUploadError(text) {
      els.uploadError.textContent = text;
      els.uploadError.hidden = text === '';
    }

    // addURL puts url at the end of the image URLs, as typed ones are, and
    // tells the page (its curl) of the change.
    function addURL(url) {
      const typed = els.urls.value.replace(/\s+$/, '');
      els.urls.value = typed ? `${typed}\n${url}` : url;
      els.urls.dispatchEvent(new Event('input', { bubbles: true }));
    }

    function removeURL(url) {
      els.urls.value = els.urls.value.split(/\r?\n/).filter((l) => l.trim() !== url).join('\n');
      els.urls.dispatchEvent(new Event('input', { bubbles: true }));
    }

    // showUpload lists an uploaded file: its thumbnail (from the URL), its
    // name, size and pixels, and a button that takes it out of the URLs.
    function showUpload(file, d) {
      const li = document.createElement('li');
      li.dataset.url = d.url;
      const href = safeURL(d.url);
      if (href) {
        const img = document.createElement('img');
        img.alt = `Uploaded: ${file.name}`;
        img.decoding = 'async';
        img.src = href;
        li.append(img);
      }
      const text = document.createElement('span');
      const type = String(d.content_type || file.type || '').replace(/^image\//, '').toUpperCase();
      const until = new Date(Number(d.expires_at) * 1000);
      text.textContent = `${file.name}: ${d.width} × ${d.height} px, ${type}, ${formatBytes(file.size)}` +
        (Number.isNaN(until.getTime()) ? '' : `; its URL is valid until ${until.toLocaleString()}`);
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.textContent = 'Remove';
      remove.setAttribute('aria-label', `Remove ${file.name} from the source images`);
      remove.addEventListener('click', () => {
        removeURL(d.url);
        li.remove();
        els.files.focus();
      });
      li.append(text, remove);
      els.uploads.append(li);
    }

    // uploadFiles uploads each file in turn, adding the URL of each the
    // server takes; a refusal is shown as the API wrote it.
    async function uploadFiles(files) {
      if (files.length === 0) return;
      showUploadError('');
      if (opts.ready && !opts.ready()) {
        showUploadError('Not uploaded: enter the API key first.');
        return;
      }
      const max = Number(els.files.dataset.maxBytes) || Infinity;
      const refused = [];
      let done = 0;
      uploading++;
      updateSubmit();
      try {
        for (const [i, file] of files.entries()) {
          if (file.size > max) {
            refused.push(`${file.name} is ${formatBytes(file.size)}, over the ${formatBytes(max)} limit`);
            continue;
          }
          els.uploadStatus.textContent = `Uploading ${file.name} (${formatBytes(file.size)}, ${i + 1} of ${files.length})…`;
          try {
            const form = new FormData();
            form.append('file', file, file.name);
            const reply = await readJSON(await send('POST', opts.uploads, form));
            const d = reply && reply.data;
            if (!d || typeof d.url !== 'string' || d.url === '') throw new Error('the upload answer had no url');
            addURL(d.url);
            showUpload(file, d);
            done++;
          } catch (err) {
            refused.push(`${file.name}: ${err instanceof APIError ? err.message : 'network error: ' + (err && err.message ? err.message : String(err))}`);
          }
        }
      } finally {
        uploading--;
        updateSubmit();
      }
      els.uploadStatus.textContent = done > 0 ? `Uploaded ${done} of ${files.length}; the URLs are in the list.` : '';
      if (refused.length > 0) showUploadError(`Not uploaded: ${refused.join('; ')}`);
    }

    function dragsFiles(ev) {
      return !!ev.dataTransfer && Array.from(ev.dataTransfer.types || []).includes('Files');
    }

    function mountUploads() {
      if (!els.upload) return;
      if (!opts.uploads || !els.urls || !els.files || !els.uploads) {
        els.upload.hidden = true;
        return;
      }
      els.files.addEventListener('change', () => {
        const files = Array.from(els.files.files || []);
        els.files.value = ''; // the same file may be chosen again
        uploadFiles(files);
      });
      // Files dropped on the URL list are uploaded; dropped text is typed
      // in as the browser does.
      els.urls.addEventListener('dragover', (ev) => {
        if (!dragsFiles(ev)) return;
        ev.preventDefault();
        ev.dataTransfer.dropEffect = 'copy';
        els.urls.classList.add('dropping');
      });
      els.urls.addEventListener('dragleave', () => els.urls.classList.remove('dropping'));
      els.urls.addEventListener('drop', (ev) => {
        els.urls.classList.remove('dropping');
        if (!dragsFiles(ev)) return;
        ev.preventDefault();
        uploadFiles(Array.from(ev.dataTransfer.files || []));
      });
    }

    els.form.addEventListener('submit', onSubmit);
    els.form.addEventListener('input', refresh);
    els.form.addEventListener('change', refresh);
    els.prompt.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        els.form.requestSubmit();
      }
    });
    if (els.cancel) els.cancel.addEventListener('click', onCancel);
    mountUploads();
    refresh();
    return { createBody, refresh };
  }

  // readJSON and safeURL serve the console's own requests and links too.
  return { mount, readJSON, safeURL };
})();
