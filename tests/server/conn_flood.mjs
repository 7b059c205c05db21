// Connection-exhaustion checks against a running server (issue 50, item 1), driven by
// tests/server/harden_conn.sh. Loopback clients pick their source address (127.0.0.x), so one
// machine plays a flooding client and separate legitimate ones.
// usage: node conn_flood.mjs PHASE PORT [KEY]
//   flood-one    1,100 idle sockets from 127.0.0.1 held; /health (127.0.0.2 and 127.0.0.1) and a
//                keyed completion (127.0.0.3) must each answer within 1 s
//   flood-many   1,100 idle sockets from ten addresses (over --threads-http in total, under the
//                per-address limit): /health from another address within 1 s
//   per-ip       (server with --max-connections-per-ip 3) three busy connections from 127.0.0.1:
//                a fourth from it is refused, 127.0.0.2 is served; three idle ones: a fourth
//                evicts the oldest and is served
//   header       (server with --header-timeout 1) a silent socket, a slow trickler and an idle
//                keep-alive connection are closed after ~1 s
//   streams      300 concurrent streaming completions all finish with [DONE]
import http from 'node:http';
import net from 'node:net';

const [phase, portArg, key] = process.argv.slice(2);
const port = Number(portArg);
let fails = 0;
const ok = (what) => console.log(`ok: ${what}`);
const bad = (what) => { fails++; console.log(`FAIL: ${what}`); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ==== sockets ====
// An idle socket from `from`; resolves once connected. `closed` is set when the server closes it.
function idleSocket(from) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: from });
    s.info = { closed: false, closedAt: 0, connected: false };
    s.on('connect', () => { s.info.connected = true; resolve(s); });
    s.on('error', () => {});
    s.on('close', () => { s.info.closed = true; s.info.closedAt = Date.now(); if (!s.info.connected) resolve(s); });
    s.on('data', (d) => { s.info.data = (s.info.data || '') + d; });
  });
}

async function flood(addrs, n) {
  const socks = [];
  for (let i = 0; i < n; i += 50) {
    const batch = [];
    for (let k = i; k < Math.min(n, i + 50); k++) batch.push(idleSocket(addrs[k % addrs.length]));
    socks.push(...(await Promise.all(batch)));
  }
  return socks;
}

// One request on a fresh connection from `from`: {status, ms, body} or {error, ms}.
function request(from, method, path, body, headers = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const req = http.request({ host: '127.0.0.1', port, method, path, localAddress: from, agent: false,
      headers: { ...headers, ...(body ? { 'Content-Type': 'application/json' } : {}) } }, (res) => {
      let data = '';
      res.on('data', (d) => (data += d));
      res.on('end', () => resolve({ status: res.statusCode, ms: Date.now() - t0, body: data }));
    });
    req.on('error', (e) => resolve({ error: e.code || String(e), ms: Date.now() - t0 }));
    req.setTimeout(10000, () => req.destroy(new Error('timeout')));
    req.end(body);
  });
}

// Waits until the server has taken every flood socket off its listen queue (admitted, evicted
// or refused): the lock-out being tested is a flood *held*, not the burst of accepts before it.
async function settle(n) {
  const t0 = Date.now();
  for (;;) {
    const held = (await metric('mlxcel_http_connections{state="idle"}')) + (await metric('mlxcel_http_connections{state="busy"}'));
    const gone = (await metric('mlxcel_http_connections_closed_total{reason="evicted"}')) +
      (await metric('mlxcel_http_connections_refused_total{reason="limit"}')) +
      (await metric('mlxcel_http_connections_refused_total{reason="per_ip"}'));
    if (held + gone >= n || Date.now() - t0 > 20000) {
      console.log(`flood: the server had accepted it ${Date.now() - t0} ms later (${held} open, ${gone} evicted or refused)`);
      return;
    }
    await sleep(50);
  }
}

async function metric(name) {
  const r = await request('127.0.0.4', 'GET', '/metrics', null, key ? { Authorization: `Bearer ${key}` } : {});
  const line = (r.body || '').split('\n').find((l) => l.startsWith(name + ' '));
  return line ? Number(line.split(' ')[1]) : NaN;
}

function within(what, r, ms, status = 200) {
  if (r.status === status && r.ms < ms) ok(`${what}: ${r.status} in ${r.ms} ms`);
  else bad(`${what}: ${r.status ?? r.error} in ${r.ms} ms (want ${status} within ${ms} ms) ${r.body ?? ''}`);
  return r;
}

const auth = key ? { Authorization: `Bearer ${key}` } : {};
const completion = JSON.stringify({ prompt: 'hello', max_tokens: 4, temperature: 0 });

// ==== phases ====
async function floodOne() {
  const t0 = Date.now();
  const socks = await flood(['127.0.0.1'], 1100);
  const held = socks.filter((s) => s.info.connected).length;
  console.log(`flood: ${held} of 1100 sockets connected from 127.0.0.1 in ${Date.now() - t0} ms`);
  await settle(1100);
  within('/health from 127.0.0.2 under the flood', await request('127.0.0.2', 'GET', '/health'), 1000);
  within('keyed completion from 127.0.0.3 under the flood',
    await request('127.0.0.3', 'POST', '/v1/completions', completion, auth), 1000);
  within('/health from the flooding address itself', await request('127.0.0.1', 'GET', '/health'), 1000);
  const evicted = await metric('mlxcel_http_connections_closed_total{reason="evicted"}');
  const idle = await metric('mlxcel_http_connections{state="idle"}');
  // the flood exceeds the per-address limit (512 of 1,024) by 588: those evicted the oldest
  if (evicted >= 588 && idle <= 512) ok(`flood evicted itself: ${evicted} evicted, ${idle} idle held`);
  else bad(`eviction accounting: ${evicted} evicted, ${idle} idle (want >= 588 and <= 512)`);
  const open = socks.filter((s) => !s.info.closed).length;
  console.log(`flood: ${open} flood sockets still open on the client side`);
  socks.forEach((s) => s.destroy());
}

async function floodMany() {
  const addrs = Array.from({ length: 10 }, (_, i) => `127.0.0.${10 + i}`);
  const socks = await flood(addrs, 1100);
  console.log(`flood: ${socks.filter((s) => s.info.connected).length} of 1100 sockets connected from 10 addresses`);
  await settle(1100);
  within('/health from 127.0.0.2 with the server full of idle connections',
    await request('127.0.0.2', 'GET', '/health'), 1000);
  within('keyed completion from 127.0.0.3 with the server full',
    await request('127.0.0.3', 'POST', '/v1/completions', completion, auth), 1000);
  const evicted = await metric('mlxcel_http_connections_closed_total{reason="evicted"}');
  if (evicted >= 1100 - 1024) ok(`${evicted} idle connections evicted at --threads-http`);
  else bad(`evicted ${evicted}, want >= 76`);
  socks.forEach((s) => s.destroy());
}

// A busy connection: a complete header promising a body that never comes.
function busySocket(from) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: from }, () => {
      s.write(`POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"con`);
      resolve(s);
    });
    s.on('error', () => {});
  });
}

async function perIp() {
  const busy = [];
  for (let i = 0; i < 3; i++) busy.push(await busySocket('127.0.0.1'));
  await sleep(300);
  const r = await request('127.0.0.1', 'GET', '/health');
  if (r.error || r.status === undefined) ok(`fourth connection from a busy address refused (${r.error})`);
  else bad(`fourth connection from 127.0.0.1 answered ${r.status}; want refused`);
  within('another address is served', await request('127.0.0.2', 'GET', '/health'), 1000);
  const refused = await metric('mlxcel_http_connections_refused_total{reason="per_ip"}');
  if (refused >= 1) ok(`refused{per_ip} = ${refused}`);
  else bad(`refused{per_ip} = ${refused}, want >= 1`);
  busy.forEach((s) => s.destroy());
  await sleep(300);
  const idle = [];
  for (let i = 0; i < 3; i++) idle.push(await idleSocket('127.0.0.1'));
  await sleep(100);
  within('a fourth connection evicts its address\'s oldest idle one', await request('127.0.0.1', 'GET', '/health'), 1000);
  await sleep(200);
  if (idle[0].info.closed && !idle[2].info.closed) ok('the oldest idle connection was the one closed');
  else bad(`eviction order: closed = ${idle.map((s) => s.info.closed)}`);
  idle.forEach((s) => s.destroy());
}

async function header() {
  const t0 = Date.now();
  const silent = await idleSocket('127.0.0.1');
  const trickle = await idleSocket('127.0.0.1');
  trickle.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  const timer = setInterval(() => { if (!trickle.info.closed) trickle.write('X-Slow: a\r\n'); }, 100);
  // a keep-alive connection: one answered request, then silence
  const ka = await idleSocket('127.0.0.1');
  ka.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  await sleep(3000);
  clearInterval(timer);
  for (const [what, s] of [['silent socket', silent], ['trickling socket', trickle]]) {
    const at = s.info.closedAt - t0;
    if (s.info.closed && at >= 800 && at < 2600) ok(`${what} closed after ${at} ms (--header-timeout 1)`);
    else bad(`${what}: closed=${s.info.closed} after ${at} ms`);
  }
  if (ka.info.closed && /200 OK/.test(ka.info.data || '')) ok('idle keep-alive connection closed after its answer');
  else bad(`keep-alive: closed=${ka.info.closed} data=${JSON.stringify(ka.info.data)}`);
  const n = await metric('mlxcel_http_connections_closed_total{reason="header_timeout"}');
  if (n >= 3) ok(`closed{header_timeout} = ${n}`);
  else bad(`closed{header_timeout} = ${n}, want >= 3`);
}

async function streams() {
  const n = 300;
  const body = JSON.stringify({ prompt: 'stream me', max_tokens: 8, stream: true });
  const t0 = Date.now();
  const rs = await Promise.all(Array.from({ length: n }, () => request('127.0.0.1', 'POST', '/v1/completions', body, auth)));
  const done = rs.filter((r) => r.status === 200 && r.body.includes('data: [DONE]')).length;
  if (done === n) ok(`${n} concurrent streams finished in ${Date.now() - t0} ms`);
  else bad(`${done} of ${n} streams finished; first failure: ${JSON.stringify(rs.find((r) => !(r.status === 200 && r.body.includes('[DONE]'))))}`);
}

const phases = { 'flood-one': floodOne, 'flood-many': floodMany, 'per-ip': perIp, header, streams };
if (!phases[phase]) { console.error(`unknown phase ${phase}`); process.exit(2); }
await phases[phase]();
process.exit(fails ? 1 : 0);
