// Raw-HTTP checks against a running server (issue 50, items 5 and 6), driven by
// tests/server/harden_http.sh: requests no ordinary client sends, byte for byte.
// usage: node raw_http.mjs PHASE PORT
//   framing      duplicate Content-Length, Content-Length + Transfer-Encoding, an unknown
//                Transfer-Encoding, HTTP/1.1 without Host or with two: 400/501 JSON and the
//                connection closed (nothing after the first answer)
//   mhd          what libmicrohttpd answers itself: `HELLO` closes cleanly, a bad chunk 400,
//                a huge header 431, HTTP/2.0 505, each with the connection closed
//   incomplete   60 connections that send half a request and hang up (the log must stay short)
import net from 'node:net';

const [phase, portArg] = process.argv.slice(2);
const port = Number(portArg);
let fails = 0;
const ok = (what) => console.log(`ok: ${what}`);
const bad = (what) => { fails++; console.log(`FAIL: ${what}`); };

// Sends `data`, reads until the server closes (or `ms` pass): {text, closed, ms}.
function raw(data, ms = 3000) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    let text = '';
    const s = net.connect({ host: '127.0.0.1', port }, () => s.write(data));
    const done = (closed) => { clearTimeout(timer); s.destroy(); resolve({ text, closed, ms: Date.now() - t0 }); };
    const timer = setTimeout(() => done(false), ms);
    s.on('data', (d) => (text += d.toString('latin1')));
    s.on('end', () => done(true));
    s.on('error', () => done(true));
  });
}

const status = (t) => Number((/^HTTP\/1\.[01] (\d{3})/.exec(t) || [])[1]);
const responses = (t) => (t.match(/^HTTP\/1\.[01] \d{3}/gm) || []).length;
function jsonError(t) {
  const body = t.slice(t.indexOf('\r\n\r\n') + 4);
  try { const o = JSON.parse(body); return o.error && typeof o.error.message === 'string' ? o.error : null; } catch { return null; }
}

async function framing() {
  const cases = [
    ['two different Content-Length', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 28\r\n\r\n{"content":"abcdefghijklmn"}GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', 400],
    ['two equal Content-Length', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 17\r\ncontent-length: 17\r\n\r\n{"content":"abc"}', 400],
    ['Content-Length with Transfer-Encoding', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n{"content":"abc"}\r\n0\r\n\r\n', 400],
    ['Transfer-Encoding gzip', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\nxxxx', 501],
    ['HTTP/1.1 without Host', 'GET /health HTTP/1.1\r\n\r\n', 400],
    ['two Host headers', 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n', 400],
  ];
  for (const [what, data, want] of cases) {
    const r = await raw(data);
    const e = jsonError(r.text);
    if (status(r.text) === want && e && e.code === want && r.closed && responses(r.text) === 1 &&
        /\r\nConnection: close\r\n/i.test(r.text))
      ok(`${what}: ${want} JSON (${e.message}), connection closed`);
    else bad(`${what}: want ${want} JSON + close, got closed=${r.closed} ${JSON.stringify(r.text.slice(0, 400))}`);
  }
  // a well-formed chunked body still works
  const r = await raw('POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n11\r\n{"content":"abc"}\r\n0\r\n\r\n');
  if (status(r.text) === 200 && r.text.includes('"tokens"')) ok('chunked body accepted');
  else bad(`chunked body: ${JSON.stringify(r.text.slice(0, 300))}`);
}

async function mhd() {
  const hello = await raw('HELLO\r\n\r\n');
  if (hello.closed && hello.text === '' && hello.ms < 1000) ok(`HELLO: clean close, no bytes, ${hello.ms} ms`);
  else if (status(hello.text) === 400 && hello.closed) ok('HELLO: 400');
  else bad(`HELLO: ${JSON.stringify(hello)}`);
  const cases = [
    ['malformed chunk', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', 400],
    ['header over the pool', `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(40000)}\r\n\r\n`, 431],
    ['HTTP/2.0 request line', 'GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n', 505],
    ['Content-Length not a number', 'POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n', 400],
  ];
  for (const [what, data, want] of cases) {
    const r = await raw(data);
    if (status(r.text) === want && r.closed) ok(`${what}: ${want} from libmicrohttpd, connection closed`);
    else bad(`${what}: want ${want} + close, got closed=${r.closed} ${JSON.stringify(r.text.slice(0, 300))}`);
  }
}

async function incomplete() {
  for (let i = 0; i < 60; i++) {
    await new Promise((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => {
        s.write('POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Len');
        setTimeout(() => { s.destroy(); resolve(); }, 5);
      });
      s.on('error', resolve);
    });
  }
  ok('60 incomplete requests sent');
}

const phases = { framing, mhd, incomplete };
if (!phases[phase]) { console.error(`unknown phase ${phase}`); process.exit(2); }
await phases[phase]();
process.exit(fails ? 1 : 0);
