// Soak against a running server (issue 50): for SECONDS, at the same time,
//   - CLIENTS streaming clients in a closed loop (keep-alive), a third of their requests
//     abandoned at a random point (after a random number of events or milliseconds);
//   - an idle-connection flood: FLOOD sockets from two other addresses that send nothing and
//     reconnect as soon as the server closes them (header deadline, eviction);
//   - oversized bodies: a Content-Length over --max-body-size, a chunked body 1.5x past it
//     (the default 16 MiB), and a body under it made of tiny JSON values (each must be 413);
// then, idle: KV blocks, slots and the queue must all be free in /metrics and /slots, and RSS
// (sampled every 2 s from /proc/PID/status) flat: the second half's peak within 10% + 32 MiB
// of the first half's. Exit status 1 on any failed well-formed request or check.
// usage: node soak.mjs URL SERVER_PID [--clients N] [--seconds S] [--flood F] [--max-tokens T]
//        [--key KEY] [--json FILE]
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

const args = process.argv.slice(2);
const url = new URL(args[0]);
const pid = Number(args[1]);
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const CLIENTS = Number(opt('--clients', 64));
const SECONDS = Number(opt('--seconds', 180));
const FLOOD = Number(opt('--flood', 600));
const MAX_TOKENS = Number(opt('--max-tokens', 48));
const KEY = opt('--key', '');
const JSON_OUT = opt('--json', '');
const port = Number(url.port);
const host = url.hostname;
const auth = KEY ? { Authorization: `Bearer ${KEY}` } : {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const deadline = t0 + SECONDS * 1000;
let rng = 0x9e3779b9;
const rand = () => { rng ^= rng << 13; rng ^= rng >>> 17; rng ^= rng << 5; return (rng >>> 0) / 4294967296; };

const st = {
  requests: 0, completed: 0, abandoned: 0, failed: 0, tokens: 0, failures: [],
  flood_opened: 0, flood_closed_by_server: 0,
  oversized_sent: 0, oversized_413: 0, oversized_other: [],
  rss_kb: [], checks: [],
};
const fail = (what) => { st.failed++; if (st.failures.length < 20) st.failures.push(what); };

// ==== streaming clients ====
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
const words = 'the of a plant genus family small tree flower water person used having relating native large form'.split(' ');

function oneStream(abandon) {
  return new Promise((resolve) => {
    const n = 4 + Math.floor(rand() * 40);
    const prompt = Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
    const body = JSON.stringify({ prompt, max_tokens: 4 + Math.floor(rand() * MAX_TOKENS), stream: true, temperature: 0.8 });
    const stopAfterEvents = abandon ? 1 + Math.floor(rand() * 8) : Infinity;
    let events = 0, text = '', settled = false;
    const done = (what) => { if (!settled) { settled = true; resolve(what); } };
    const req = http.request({ host, port, method: 'POST', path: '/v1/completions', agent,
      headers: { 'Content-Type': 'application/json', ...auth } }, (res) => {
      if (res.statusCode !== 200) {
        let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => done(`status ${res.statusCode}: ${b.slice(0, 200)}`));
        return;
      }
      res.on('data', (d) => {
        text += d;
        events += (String(d).match(/^data: /gm) || []).length;
        if (events >= stopAfterEvents) { req.destroy(); done('abandoned'); }
      });
      res.on('end', () => {
        if (abandon && settled) return;
        const ok = text.includes('data: [DONE]') && /"finish_reason":"(length|stop)"/.test(text) && !text.includes('"error"');
        st.tokens += (text.match(/"text":/g) || []).length;
        done(ok ? 'completed' : `malformed stream: ${text.slice(-300)}`);
      });
      res.on('error', (e) => done(abandon ? 'abandoned' : `response error ${e.code || e}`));
    });
    req.on('error', (e) => done(settled || abandon ? 'abandoned' : `request error ${e.code || e}`));
    if (abandon && rand() < 0.5) setTimeout(() => { req.destroy(); done('abandoned'); }, Math.floor(rand() * 400));
    req.setTimeout(120000, () => { req.destroy(); done('timeout (120 s)'); });
    req.end(body);
  });
}

async function client() {
  while (Date.now() < deadline) {
    const abandon = rand() < 1 / 3;
    st.requests++;
    const r = await oneStream(abandon);
    if (r === 'completed') st.completed++;
    else if (r === 'abandoned') st.abandoned++;
    else fail(r);
  }
}

// ==== idle flood ====
let flooding = true;
function floodSocket(from) {
  if (!flooding) return;
  st.flood_opened++;
  const s = net.connect({ host, port, localAddress: from });
  s.on('error', () => {});
  s.on('close', () => { if (flooding) { st.flood_closed_by_server++; setTimeout(() => floodSocket(from), 20); } });
  floodSockets.add(s);
  s.on('close', () => floodSockets.delete(s));
}
const floodSockets = new Set();

// ==== oversized bodies ====
function oversized(kind) {
  return new Promise((resolve) => {
    const headers = { 'Content-Type': 'application/json', ...auth };
    let body = null;
    if (kind === 'length') headers['Content-Length'] = String(64 << 20); // never sent: refused on its header
    else if (kind === 'tiny') body = `{"content":"x","junk":[${'{},'.repeat(4 << 20)}{}]}`;
    const req = http.request({ host, port, method: 'POST', path: '/tokenize', agent: false, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', (e) => resolve(`error ${e.code || e}`));
    req.setTimeout(60000, () => req.destroy(new Error('timeout')));
    if (kind === 'chunked') { // 1.5x the default 16 MiB limit, 1 MiB chunks: read, dropped, 413
      const chunk = Buffer.alloc(1 << 20, 0x20);
      for (let i = 0; i < 24; i++) req.write(chunk);
      req.end();
    } else if (body) req.end(body);
    else req.flushHeaders();
  });
}

async function oversizer() {
  const kinds = ['length', 'chunked', 'tiny'];
  for (let i = 0; Date.now() < deadline; i++) {
    const kind = kinds[i % 3];
    st.oversized_sent++;
    const code = await oversized(kind);
    if (code === 413) st.oversized_413++;
    else if (st.oversized_other.length < 10) st.oversized_other.push(`${kind}: ${code}`);
    await sleep(200);
  }
}

// ==== RSS ====
const rssNow = () => Number((/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8')) || [])[1]);
async function sampler() {
  while (Date.now() < deadline) { st.rss_kb.push([Math.round((Date.now() - t0) / 1000), rssNow()]); await sleep(2000); }
}

function get(path) {
  return new Promise((resolve) => {
    http.get({ host, port, path, headers: auth, agent: false }, (res) => {
      let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => resolve(b));
    }).on('error', () => resolve(''));
  });
}
const metricOf = (text, name) => { const l = text.split('\n').find((x) => x.startsWith(name + ' ')); return l ? Number(l.split(' ')[1]) : NaN; };
const check = (cond, what) => { st.checks.push(`${cond ? 'ok' : 'FAIL'}: ${what}`); return cond; };

// ==== run ====
const base = rssNow();
for (let i = 0; i < FLOOD; i++) floodSocket(`127.0.0.${50 + (i % 2)}`);
const work = [sampler(), oversizer(), oversizer(), ...Array.from({ length: CLIENTS }, client)];
const progress = setInterval(() => console.log(`[${Math.round((Date.now() - t0) / 1000)} s] requests ${st.requests}: ${st.completed} completed, ${st.abandoned} abandoned, ${st.failed} failed; flood sockets closed by the server ${st.flood_closed_by_server}; oversized ${st.oversized_413}/${st.oversized_sent} 413; RSS ${rssNow()} kB`), 15000);
await Promise.all(work);
clearInterval(progress);
flooding = false;
for (const s of floodSockets) s.destroy();
agent.destroy();

// idle: everything free
let m = '', slots = [];
for (let i = 0; i < 50; i++) {
  await sleep(200);
  m = await get('/metrics');
  try { slots = JSON.parse(await get('/slots')); } catch { slots = []; }
  if (metricOf(m, 'mlxcel_kv_blocks_used') === 0 && metricOf(m, 'llamacpp:requests_processing') === 0 &&
      metricOf(m, 'mlxcel_queue_depth') === 0 && slots.length && slots.every((s) => !s.is_processing)) break;
}
const ev = (n) => metricOf(m, n);
check(st.failed === 0, `${st.failed} failed well-formed requests of ${st.requests - st.abandoned}`);
check(st.completed > 0 && st.abandoned > 0, `${st.completed} completed and ${st.abandoned} abandoned`);
check(ev('mlxcel_kv_blocks_used') === 0 && ev('mlxcel_kv_blocks_free') === ev('mlxcel_kv_blocks_capacity'),
  `KV blocks all free at the end (${ev('mlxcel_kv_blocks_free')} of ${ev('mlxcel_kv_blocks_capacity')})`);
check(ev('llamacpp:requests_processing') === 0 && ev('mlxcel_queue_depth') === 0 && ev('llamacpp:requests_deferred') === 0,
  'no request running or queued at the end');
check(slots.length > 0 && slots.every((s) => !s.is_processing), `/slots: all ${slots.length} slots free`);
check(st.oversized_413 === st.oversized_sent, `oversized bodies: ${st.oversized_413} of ${st.oversized_sent} answered 413 ${st.oversized_other.join('; ')}`);
check(st.flood_closed_by_server > 0, `the idle flood was closed by the server ${st.flood_closed_by_server} times`);
const half = st.rss_kb.length >> 1;
const peak1 = Math.max(...st.rss_kb.slice(0, half).map((x) => x[1]));
const peak2 = Math.max(...st.rss_kb.slice(half).map((x) => x[1]));
check(half > 0 && peak2 <= peak1 * 1.1 + 32768, `RSS flat: peak ${peak1} kB in the first half, ${peak2} kB in the second (start ${base} kB)`);
const summary = {
  seconds: SECONDS, clients: CLIENTS, flood: FLOOD, requests: st.requests, completed: st.completed, abandoned: st.abandoned,
  failed: st.failed, failures: st.failures, stream_events: st.tokens,
  flood_sockets_opened: st.flood_opened, flood_closed_by_server: st.flood_closed_by_server,
  oversized_sent: st.oversized_sent, oversized_413: st.oversized_413,
  rss_start_kb: base, rss_peak_first_half_kb: peak1, rss_peak_second_half_kb: peak2, rss_end_kb: rssNow(),
  metrics_end: Object.fromEntries(['mlxcel_kv_blocks_used', 'mlxcel_kv_blocks_free', 'mlxcel_kv_blocks_capacity',
    'llamacpp:requests_processing', 'mlxcel_queue_depth', 'mlxcel_requests_finished_total{reason="cancelled"}',
    'mlxcel_requests_finished_total{reason="length"}', 'mlxcel_requests_finished_total{reason="stop"}',
    'mlxcel_http_connections_closed_total{reason="evicted"}', 'mlxcel_http_connections_closed_total{reason="header_timeout"}',
    'mlxcel_http_connections_refused_total{reason="per_ip"}', 'mlxcel_http_connections_refused_total{reason="limit"}',
    'mlxcel_http_responses_total{code="413"}', 'llamacpp:tokens_predicted_total'].map((k) => [k, ev(k)])),
  checks: st.checks,
};
console.log(JSON.stringify(summary, null, 1));
if (JSON_OUT) fs.writeFileSync(JSON_OUT, JSON.stringify(summary, null, 1));
process.exit(st.checks.every((c) => c.startsWith('ok')) ? 0 : 1);
