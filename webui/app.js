// The chat page: wires the DOM to chat.js (state, requests) and markdown.js (rendering).
// Every piece of text from the model or the user reaches the page through textContent or
// renderMarkdown(): no innerHTML anywhere.
import {
  conversationTitle, fetchServerInfo, isConversationsKey, loadConversations, loadCurrentId, loadKey,
  loadSettings, newConversation, replyStats, requestBody, saveConversations, saveCurrentId, saveKey,
  saveSettings, SETTING_FIELDS, splitThink, streamReply,
} from './chat.js';
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

// ==== State ====
const state = {
  convs: loadConversations(),
  current: null,   // the conversation shown (may be a draft not yet in convs)
  settings: loadSettings(),
  info: null,      // fetchServerInfo()
  live: null,      // {conv, msg, ctrl, el}: the reply being streamed
  keyPrompt: null, // the pending askKey() promise
};

function notice(text) {
  const n = $('notice');
  n.textContent = text || '';
  n.hidden = !text;
}

function persist() {
  try {
    saveConversations(state.convs);
    saveCurrentId(state.current && state.convs.includes(state.current) ? state.current.id : null);
  } catch (e) {
    notice(e.message);
  }
}

let persistTimer = 0;
function persistSoon() { // while streaming: at most once a second
  if (!persistTimer) persistTimer = setTimeout(() => { persistTimer = 0; persist(); }, 1000);
}

// ==== API key ====
// Resolves true once the user gave a key, false when they cancelled.
function askKey(reason) {
  if (state.keyPrompt) return state.keyPrompt;
  const dlg = $('key-dialog');
  $('key-reason').textContent = reason;
  $('key-input').value = '';
  state.keyPrompt = new Promise((resolve) => {
    const done = (ok) => {
      $('key-form').onsubmit = null;
      $('key-cancel').onclick = null;
      dlg.oncancel = null;
      if (dlg.open) dlg.close();
      state.keyPrompt = null;
      resolve(ok);
    };
    $('key-form').onsubmit = (ev) => {
      ev.preventDefault();
      const k = $('key-input').value.trim();
      if (!k) return;
      saveKey(k);
      done(true);
    };
    $('key-cancel').onclick = () => done(false);
    dlg.oncancel = () => done(false);
  });
  dlg.showModal();
  $('key-input').focus();
  return state.keyPrompt;
}

// Runs fn(); on 401 asks for a key and runs it again.
async function withKey(fn) {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (e.status !== 401) throw e;
      const had = loadKey();
      if (had) saveKey('');
      const ok = await askKey(had ? 'The server refused the stored API key. Enter the key again.'
                                  : 'This server needs an API key.');
      if (!ok) throw new Error('this server needs an API key (Settings, or reload the page to enter it)');
    }
  }
}

// ==== Server info ====
function fmtParams(n) {
  if (!n) return '';
  return n >= 1e9 ? (n / 1e9).toFixed(1) + 'B' : n >= 1e6 ? Math.round(n / 1e6) + 'M' : String(n);
}

async function loadInfo() {
  try {
    state.info = await withKey(fetchServerInfo);
    notice('');
  } catch (e) {
    $('model-name').textContent = 'not connected';
    notice('Cannot read the server\'s /props: ' + e.message);
    return;
  }
  const i = state.info;
  $('model-name').textContent = i.alias || i.model || 'model';
  const meta = [];
  if (i.n_ctx) meta.push(`ctx ${i.n_ctx}`);
  if (i.n_params) meta.push(fmtParams(i.n_params) + ' params');
  if (i.slots) meta.push(`${i.slots} slot${i.slots === 1 ? '' : 's'}`);
  $('model-meta').textContent = meta.join(' · ');
  $('empty-model').textContent = i.alias || i.model || 'the model';
  $('build-info').textContent = i.build;
  document.title = `${i.alias || i.model} · mlxcel`;
  renderConversation();
}

// ==== Sidebar ====
function sortedConvs() {
  return [...state.convs].sort((a, b) => b.updated - a.updated);
}

function renderSidebar() {
  const list = $('conv-list');
  list.replaceChildren();
  for (const c of sortedConvs()) {
    const li = el('li', c === state.current ? 'active' : '');
    li.dataset.id = c.id;
    const open = el('button', 'conv-title', conversationTitle(c));
    open.type = 'button';
    open.title = conversationTitle(c);
    if (c === state.current) open.setAttribute('aria-current', 'true');
    open.onclick = () => selectConversation(c);
    const rename = el('button', 'icon rename', '✎');
    rename.type = 'button';
    rename.title = 'Rename';
    rename.setAttribute('aria-label', 'Rename');
    rename.onclick = () => startRename(li, c);
    const del = el('button', 'icon delete', '×');
    del.type = 'button';
    del.title = 'Delete';
    del.setAttribute('aria-label', 'Delete');
    del.onclick = () => deleteConversation(c);
    li.append(open, rename, del);
    list.appendChild(li);
  }
}

function startRename(li, c) {
  const input = el('input', 'rename-input');
  input.value = conversationTitle(c);
  input.setAttribute('aria-label', 'Conversation name');
  li.replaceChildren(input);
  input.focus();
  input.select();
  let finished = false;
  const finish = (save) => {
    if (finished) return;
    finished = true;
    if (save) {
      c.title = input.value.trim();
      persist();
    }
    renderSidebar();
  };
  input.onkeydown = (ev) => {
    if (ev.key === 'Enter') finish(true);
    if (ev.key === 'Escape') finish(false);
  };
  input.onblur = () => finish(true);
}

function deleteConversation(c) {
  if (!confirm(`Delete "${conversationTitle(c)}"?`)) return;
  if (state.live && state.live.conv === c) state.live.ctrl.abort();
  state.convs = state.convs.filter((x) => x !== c);
  if (state.current === c) state.current = sortedConvs()[0] || newConversation();
  persist();
  renderConversation();
}

function selectConversation(c) {
  state.current = c;
  persist();
  renderConversation();
  closeSidebar();
}

function openSidebar() {
  document.body.classList.add('sidebar-open');
  $('scrim').hidden = false;
  $('toggle-sidebar').setAttribute('aria-expanded', 'true');
}
function closeSidebar() {
  document.body.classList.remove('sidebar-open');
  $('scrim').hidden = true;
  $('toggle-sidebar').setAttribute('aria-expanded', 'false');
}

// ==== Messages ====
function messageEl(msg) {
  const art = el('article', 'msg ' + msg.role);
  const who = el('div', 'role', msg.role === 'user' ? 'You' : (state.info && state.info.alias) || 'Assistant');
  if (msg.role === 'user') {
    art.append(who, el('div', 'body plain', msg.content));
    return art;
  }
  const details = el('details', 'reasoning');
  const summary = el('summary', '', 'Reasoning');
  const rbody = el('div', 'md');
  details.append(summary, rbody);
  const body = el('div', 'body md');
  const error = el('div', 'error');
  const meta = el('div', 'meta');
  art.append(who, details, body, error, meta);
  art.parts = { details, summary, rbody, body, error, meta, reasoning: null, answer: null };
  updateAssistant(art, msg, false);
  return art;
}

function metaText(s) {
  if (!s) return '';
  const parts = [`${s.tokens} token${s.tokens === 1 ? '' : 's'}`];
  if (s.tps) parts.push(`${s.tps} tok/s`);
  // how full the context is after this reply: the next turn must fit in what is left
  if (s.prompt !== null && s.prompt !== undefined && state.info && state.info.n_ctx)
    parts.push(`${s.prompt + s.tokens}/${state.info.n_ctx} context`);
  if (s.finish === 'stopped') parts.push('stopped');
  else if (s.finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}

function updateAssistant(art, msg, live) {
  const p = art.parts;
  const think = splitThink(msg.content);
  const reasoning = (msg.reasoning || '') + think.reasoning;
  p.details.hidden = !reasoning;
  p.summary.textContent = live && !think.answer ? 'Thinking…' : `Reasoning (${reasoning.length} characters)`;
  if (reasoning !== p.reasoning) p.rbody.replaceChildren(renderMarkdown(reasoning));
  if (think.answer !== p.answer) p.body.replaceChildren(renderMarkdown(think.answer));
  p.reasoning = reasoning;
  p.answer = think.answer;
  art.dataset.state = live ? 'streaming' : msg.error ? 'error' : msg.stats && msg.stats.finish === 'stopped' ? 'stopped' : 'done';
  p.error.textContent = msg.error || '';
  p.error.hidden = !msg.error;
  p.meta.textContent = live ? 'generating…' : metaText(msg.stats);
}

function nearBottom() {
  const m = $('messages');
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}
function scrollToBottom() {
  const m = $('messages');
  m.scrollTop = m.scrollHeight;
}

function renderConversation() {
  const box = $('messages');
  const c = state.current;
  box.querySelectorAll('article').forEach((a) => a.remove());
  $('empty').hidden = c.messages.length > 0;
  for (const msg of c.messages) {
    const art = messageEl(msg);
    if (state.live && state.live.msg === msg) {
      state.live.el = art;
      updateAssistant(art, msg, true);
    }
    box.appendChild(art);
  }
  showSpeed();
  renderSidebar();
  scrollToBottom();
}

// tok/s of the conversation's last finished reply, in the top bar
function showSpeed() {
  const last = [...state.current.messages].reverse().find((m) => m.role === 'assistant' && m.stats && m.stats.tps);
  $('speed').textContent = last ? `${last.stats.tps} tok/s` : '';
}

// one render per animation frame, however many chunks arrived in it
let framePending = false;
function renderLiveSoon() {
  if (framePending) return;
  framePending = true;
  requestAnimationFrame(() => {
    framePending = false;
    const live = state.live;
    if (!live || !live.el || !live.el.isConnected) return;
    const stick = nearBottom();
    updateAssistant(live.el, live.msg, true);
    if (stick) scrollToBottom();
  });
}

// ==== Sending ====
function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

async function send(text) {
  if (state.live) return;
  const conv = state.current;
  if (!state.convs.includes(conv)) state.convs.push(conv);
  conv.messages.push({ role: 'user', content: text });
  const msg = { role: 'assistant', content: '', reasoning: '' };
  const body = requestBody(conv, state.settings, state.info && state.info.model);
  conv.messages.push(msg);
  conv.updated = Date.now();
  const ctrl = new AbortController();
  state.live = { conv, msg, ctrl, el: null };
  setBusy(true);
  persist();
  renderConversation();
  try {
    const st = await withKey(() => streamReply(body, msg, ctrl.signal, () => { renderLiveSoon(); persistSoon(); }));
    msg.stats = replyStats(st);
  } catch (e) {
    msg.error = e.name === 'AbortError' ? '' : e.message;
    if (e.name === 'AbortError') msg.stats = { tokens: 0, tps: 0, finish: 'stopped' };
  }
  const live = state.live;
  state.live = null;
  conv.updated = Date.now();
  setBusy(false);
  persist();
  if (live.el && live.el.isConnected) updateAssistant(live.el, msg, false);
  if (state.current === conv) showSpeed();
  if (!state.info) loadInfo();
}

function stop() {
  if (state.live) state.live.ctrl.abort();
}

// ==== Settings ====
function openSettings() {
  const s = state.settings;
  const d = (state.info && state.info.defaults) || {};
  $('set-system').value = s.system;
  for (const f of SETTING_FIELDS) {
    const input = $('set-' + f);
    input.value = s[f] === null ? '' : String(s[f]);
    const def = f === 'max_tokens' ? (d.n_predict > 0 ? d.n_predict : null) : d[f];
    input.placeholder = def === null || def === undefined ? 'server default' : String(Math.round(def * 1000) / 1000);
  }
  if (state.info && state.info.n_ctx) $('set-max_tokens').max = String(state.info.n_ctx);
  $('key-state').textContent = loadKey() ? 'An API key is stored in this browser.' : 'No API key stored.';
  $('forget-key').disabled = !loadKey();
  $('settings-dialog').showModal();
}

function saveSettingsForm(ev) {
  ev.preventDefault();
  const next = { system: $('set-system').value };
  for (const f of SETTING_FIELDS) {
    const input = $('set-' + f);
    if (!input.checkValidity()) { input.reportValidity(); return; }
    next[f] = input.value === '' ? null : Number(input.value);
  }
  try {
    saveSettings(next);
  } catch (e) {
    notice(e.message);
    return;
  }
  state.settings = next;
  $('settings-dialog').close();
}

// ==== Wiring ====
function autoGrow() {
  const t = $('input');
  t.style.height = 'auto';
  t.style.height = Math.min(t.scrollHeight, 200) + 'px';
}

function init() {
  const id = loadCurrentId();
  state.current = state.convs.find((c) => c.id === id) || newConversation();

  $('composer').onsubmit = (ev) => {
    ev.preventDefault();
    const text = $('input').value;
    if (!text.trim() || state.live) return;
    $('input').value = '';
    autoGrow();
    send(text);
  };
  // Enter sends, Shift+Enter breaks the line; on a touch screen (no Shift) Enter breaks the line
  // and the Send button sends
  const touch = matchMedia('(pointer: coarse)').matches;
  $('input').onkeydown = (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && !touch) {
      ev.preventDefault();
      $('composer').requestSubmit();
    }
  };
  $('input').oninput = autoGrow;
  $('stop').onclick = stop;
  $('new-chat').onclick = () => {
    if (state.current.messages.length) state.current = newConversation();
    renderConversation();
    closeSidebar();
    $('input').focus();
  };
  $('toggle-sidebar').onclick = () =>
    document.body.classList.contains('sidebar-open') ? closeSidebar() : openSidebar();
  $('scrim').onclick = closeSidebar;
  $('open-settings').onclick = () => { closeSidebar(); openSettings(); };
  $('settings-form').onsubmit = saveSettingsForm;
  $('settings-cancel').onclick = () => $('settings-dialog').close();
  $('forget-key').onclick = () => {
    saveKey('');
    $('key-state').textContent = 'No API key stored.';
    $('forget-key').disabled = true;
  };
  // code blocks' copy buttons (one listener for every message)
  $('messages').addEventListener('click', (ev) => {
    const b = ev.target.closest('button.copy');
    if (!b) return;
    const code = b.closest('.code').querySelector('code').textContent;
    const ok = () => { b.textContent = 'Copied'; setTimeout(() => { b.textContent = 'Copy'; }, 1200); };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(code).then(ok, () => {});
    else { // plain http to another host: no clipboard API; select the code for Ctrl+C instead
      const r = document.createRange();
      r.selectNodeContents(b.closest('.code').querySelector('code'));
      getSelection().removeAllRanges();
      getSelection().addRange(r);
    }
  });
  // another tab changed the conversations: show them (not while this tab streams)
  window.addEventListener('storage', (ev) => {
    if (!isConversationsKey(ev.key) || state.live) return;
    const id = state.current.id;
    state.convs = loadConversations();
    state.current = state.convs.find((c) => c.id === id) || state.current;
    renderConversation();
  });

  renderConversation();
  loadInfo();
  $('input').focus();
}

init();
