// Easel playground page: plain JavaScript, no framework, no build step.
// The playground itself (the form, the create, following the task, the
// result) is playground.js, which the console runs too; this page adds
// the API key that authenticates it and the request as a curl command.
// It calls only the public API of the origin that served it (/v1/task/...,
// Bearer).
'use strict';

(() => {
  // The API key is kept in sessionStorage: it lasts as long as the tab and
  // is never written to disk for later sessions, which is enough for trying
  // the API and leaves no secret behind. "Remember on this device" moves it
  // to localStorage, at the user's choice.
  const KEY_ITEM = 'easel.playground.apiKey';

  const $ = (id) => document.getElementById(id);
  const els = {
    form: $('create-form'),
    key: $('api-key'),
    showKey: $('show-key'),
    remember: $('remember-key'),
    copy: $('copy-curl'),
    copyStatus: $('copy-status'),
    curl: $('curl'),
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

  // ---- the request as curl ------------------------------------------------

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

  function refreshCurl() {
    els.curl.textContent = curlFor(playground.createBody());
  }

  async function copyCurl() {
    const text = curlFor(playground.createBody());
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

  // ---- the playground, with the key ---------------------------------------

  const playground = window.EaselPlayground.mount({
    id: (part) => (part === 'form' ? 'create-form' : part),
    base: '/v1/task',
    uploads: '/v1/uploads',
    headers: () => ({ Authorization: 'Bearer ' + els.key.value.trim() }),
    // A create is sent with a key only; the key is kept as the user chose.
    ready: () => {
      if (!els.key.value.trim()) return false;
      saveKey();
      refreshCurl();
      return true;
    },
  });

  function init() {
    loadKey();
    refreshCurl();
    els.form.addEventListener('input', refreshCurl);
    els.form.addEventListener('change', refreshCurl);
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
