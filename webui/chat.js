// The page's state without the DOM: conversations and settings in localStorage, the API key,
// requests to the server, and one streamed chat reply.
import { sseEvents } from './sse.js';

// ==== Storage ====
// One key per kind of state; versioned, so that a later page can migrate instead of misreading.
const K_CONVS = 'mlxcel.conversations.v1';
const K_CURRENT = 'mlxcel.current.v1';
const K_SETTINGS = 'mlxcel.settings.v1';
const K_KEY = 'mlxcel.apiKey.v1';

function readJson(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

// Throws a readable Error when the browser refuses (quota, storage disabled).
function writeJson(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    throw new Error(`could not save in this browser's storage (${e.name}): delete old conversations`);
  }
}

export function loadConversations() {
  const v = readJson(K_CONVS, []);
  return Array.isArray(v) ? v.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
}
export const saveConversations = (convs) => writeJson(K_CONVS, convs);
export const loadCurrentId = () => localStorage.getItem(K_CURRENT);
export const saveCurrentId = (id) => (id ? localStorage.setItem(K_CURRENT, id) : localStorage.removeItem(K_CURRENT));
export const isConversationsKey = (k) => k === K_CONVS;

export function newConversation() {
  const id = (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));
  const now = Date.now();
  return { id, title: '', created: now, updated: now, messages: [] };
}

export function conversationTitle(c) {
  if (c.title) return c.title;
  const first = c.messages.find((m) => m.role === 'user');
  const t = first ? first.content.replace(/\s+/g, ' ').trim() : '';
  return t ? (t.length > 48 ? t.slice(0, 47) + '…' : t) : 'New chat';
}

// Sampling settings: null = the server's default (from /props), sent only when set.
export const SETTING_FIELDS = ['temperature', 'top_p', 'max_tokens'];
export function loadSettings() {
  const s = readJson(K_SETTINGS, {});
  const out = { system: typeof s.system === 'string' ? s.system : '' };
  for (const f of SETTING_FIELDS) out[f] = typeof s[f] === 'number' && Number.isFinite(s[f]) ? s[f] : null;
  return out;
}
export const saveSettings = (s) => writeJson(K_SETTINGS, s);

export const loadKey = () => localStorage.getItem(K_KEY) || '';
export const saveKey = (k) => (k ? localStorage.setItem(K_KEY, k) : localStorage.removeItem(K_KEY));

// ==== Requests ====
export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The server's error body is {"error": {"message": ...}} (OpenAI's shape).
async function errorOf(res) {
  let msg = `${res.status} ${res.statusText}`;
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) msg = `${res.status}: ${j.error.message}`;
  } catch { /* not JSON: keep the status line */ }
  return new HttpError(res.status, msg);
}

// fetch with the stored API key; throws HttpError for a non-2xx answer (401: key needed).
export async function api(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const key = loadKey();
  if (key) headers.set('Authorization', 'Bearer ' + key);
  if (opts.body) headers.set('Content-Type', 'application/json');
  const res = await fetch(path, { ...opts, headers });
  if (!res.ok) throw await errorOf(res);
  return res;
}

// Model name, context and defaults: /props (llama-server's) and /v1/models (the id to send).
export async function fetchServerInfo() {
  const props = await (await api('/props')).json();
  let models = null;
  try {
    models = await (await api('/v1/models')).json();
  } catch (e) {
    if (e.status === 401) throw e;
  }
  const m = models && Array.isArray(models.data) && models.data[0] ? models.data[0] : null;
  const dgs = props.default_generation_settings || {};
  return {
    model: m ? m.id : props.model_alias || '',
    alias: props.model_alias || (m ? m.id : ''),
    n_ctx: dgs.n_ctx || (m && m.meta ? m.meta.n_ctx : 0),
    n_params: m && m.meta ? m.meta.n_params : 0,
    slots: props.total_slots || 0,
    build: props.build_info || '',
    defaults: dgs.params || {},
  };
}

// ==== Thinking ====
// A model that thinks in its content (no reasoning_content from the server) writes
// "<think>...</think>answer"; a template that opens the tag itself leaves only "...</think>".
export function splitThink(content) {
  const open = /^\s*<think>/.exec(content);
  if (open) {
    const rest = content.slice(open[0].length);
    const end = rest.indexOf('</think>');
    if (end < 0) return { reasoning: rest, answer: '', thinking: true };
    return { reasoning: rest.slice(0, end), answer: rest.slice(end + 8).replace(/^\s+/, ''), thinking: false };
  }
  const end = content.indexOf('</think>');
  if (end >= 0 && !content.slice(0, end).includes('<think>'))
    return { reasoning: content.slice(0, end), answer: content.slice(end + 8).replace(/^\s+/, ''), thinking: false };
  return { reasoning: '', answer: content, thinking: false };
}

// ==== One reply ====
// The messages sent for a conversation: the system prompt, then every turn with its visible
// answer (reasoning is not sent back, as OpenAI and llama-server's page do). A turn whose reply
// has no text (it failed, or was stopped before its first token) is left out, question
// included: resending a prompt the server refused (too long for the context, say) would fail
// every later turn too.
export function requestMessages(conv, settings) {
  const out = [];
  if (settings.system.trim()) out.push({ role: 'system', content: settings.system });
  const msgs = conv.messages;
  const failed = (m) => m && m.role === 'assistant' && !m.content;
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i];
    if (m.role === 'user' && !failed(msgs[i + 1])) out.push({ role: 'user', content: m.content });
    else if (m.role === 'assistant' && !failed(m)) out.push({ role: 'assistant', content: splitThink(m.content).answer });
  }
  return out;
}

export function requestBody(conv, settings, model) {
  const body = { messages: requestMessages(conv, settings), stream: true, stream_options: { include_usage: true } };
  if (model) body.model = model;
  for (const f of SETTING_FIELDS) if (settings[f] !== null) body[f] = settings[f];
  return body;
}

// Streams one reply into `msg` ({content, reasoning}), calling onDelta() after each chunk.
// Resolves with the reply's statistics; an abort (the stop button) resolves with
// stopped: true. Throws HttpError for an HTTP error or an error event in the stream.
export async function streamReply(body, msg, signal, onDelta) {
  const st = { chunks: 0, tFirst: 0, tLast: 0, usage: null, timings: null, finish: null, stopped: false };
  try {
    const res = await api('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal });
    for await (const data of sseEvents(res.body)) {
      if (data === '[DONE]') break;
      const o = JSON.parse(data);
      if (o.error) throw new HttpError(o.error.code || 500, o.error.message || 'error in the stream');
      if (o.usage) st.usage = o.usage;
      if (o.timings) st.timings = o.timings;
      const ch = o.choices && o.choices[0];
      if (!ch) continue;
      const d = ch.delta || {};
      const piece = (d.content || '') + (d.reasoning_content || '');
      if (d.content) msg.content += d.content;
      if (d.reasoning_content) msg.reasoning = (msg.reasoning || '') + d.reasoning_content;
      if (piece) {
        const now = performance.now();
        if (!st.chunks) st.tFirst = now;
        st.tLast = now;
        st.chunks++;
        onDelta();
      }
      if (ch.finish_reason) st.finish = ch.finish_reason;
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
    st.stopped = true;
  }
  return st;
}

// tokens and tokens/s of a reply: the server's own timings when it sends them (llama-server
// does), else completion tokens (from usage, or one per streamed chunk: this server sends a
// chunk per token) over the time from the first chunk to the last.
export function replyStats(st) {
  const tokens = st.usage ? st.usage.completion_tokens : st.chunks;
  let tps = 0;
  if (st.timings && st.timings.predicted_per_second) tps = st.timings.predicted_per_second;
  else if (tokens > 1 && st.tLast > st.tFirst) tps = ((tokens - 1) * 1000) / (st.tLast - st.tFirst);
  return {
    tokens,
    tps: Math.round(tps * 10) / 10,
    prompt: st.usage ? st.usage.prompt_tokens : null,
    finish: st.stopped ? 'stopped' : st.finish,
  };
}
