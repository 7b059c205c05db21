// Browser test of the built-in chat page (webui/), run by tests/server/webui_e2e.sh: Debian's
// chromium, driven by puppeteer-core, against two servers started by the script:
//   REAL  `mlxcel serve` with the demo model (models/wordnet-chat-16m) and --api-key KEY;
//   FAKE  mlxcel-fake-server --fake-echo --fake-step-ms 10: its "model" repeats the user's
//         message byte by byte (one token per 10 ms step), so a reply can be made to hold
//         <script>, markdown or <think>, and can be made long enough to stop half-way. The
//         demo model cannot be made to say such things; the page cannot tell the difference:
//         both replies come through the same server code and the same SSE stream.
// usage: node webui_e2e.mjs REAL_URL KEY FAKE_URL [SCREENSHOT_DIR]
// Any console error or uncaught exception in the page (a CSP violation included) fails the test.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [REAL, KEY, FAKE, SHOTS] = process.argv.slice(2);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
let pass = 0;
let fail = 0;
const check = (ok, what) => {
  if (ok) pass++;
  else { fail++; console.log('FAIL: ' + what); }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const T = 60000; // per wait: a loaded 2-core CI machine is slow, a hang still ends

// ==== Page helpers ====
const pageErrors = [];
function watchPage(page, label) {
  page.on('console', (m) => {
    // Chrome logs every 401 answer; the page gets them on purpose (it probes, then asks for the key)
    if (m.type() === 'error' && !/status of 401 \(Unauthorized\)/.test(m.text()))
      pageErrors.push(`${label} console: ${m.text()}`);
  });
  page.on('pageerror', (e) => pageErrors.push(`${label} exception: ${e.message}`));
  page.on('dialog', (d) => d.accept()); // the delete confirmation
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);
const lastAssistant = 'article.assistant:last-of-type';
const norm = (s) => s.replace(/\s+/g, ' ').trim();

// Records every distinct text of the newest assistant reply as the page changes it.
async function recordStates(page) {
  await page.evaluate(() => {
    const box = document.getElementById('messages');
    const states = (window.__states = []);
    const rec = () => {
      const all = box.querySelectorAll('article.assistant .body');
      const t = all.length ? all[all.length - 1].textContent : '';
      if (t && states[states.length - 1] !== t) states.push(t);
    };
    if (window.__obs) window.__obs.disconnect();
    window.__obs = new MutationObserver(rec);
    window.__obs.observe(box, { subtree: true, childList: true, characterData: true });
  });
}
const states = (page) => page.evaluate(() => window.__states.slice());

// Puts `msg` in the composer and sends it (typing 3000 characters would take long).
async function send(page, msg) {
  await page.$eval('#input', (t, v) => { t.value = v; t.dispatchEvent(new Event('input')); }, msg);
  await page.click('#send');
}
const nArticles = (page) => page.$$eval('#messages article', (a) => a.length);
async function waitReply(page, before) { // the reply after `before` articles has finished
  await page.waitForFunction((n) => {
    const a = document.querySelectorAll('#messages article');
    return a.length >= n + 2 && a[a.length - 1].dataset.state !== 'streaming';
  }, { timeout: T }, before);
}

async function metrics(url) {
  const t = await (await fetch(url + '/metrics')).text();
  const get = (re) => { const m = t.match(re); return m ? Number(m[1]) : NaN; };
  return {
    cancelled: get(/^mlxcel_requests_finished_total\{reason="cancelled"\} (\S+)$/m),
    running: get(/^mlxcel_requests_running (\S+)$/m),
    predicted: get(/^llamacpp:tokens_predicted_total (\S+)$/m),
  };
}

// ==== Browser ====
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mlxcel-webui-chromium-'));
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  userDataDir: profile, // fresh profile: no stored conversations, settings or key
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const t0 = Date.now();
try {
  await realModel();
  await fakeEcho();
} catch (e) {
  fail++;
  console.log('FAIL: ' + (e.stack || e));
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
for (const e of pageErrors) check(false, e);
console.log(`webui_e2e.mjs: ${pass} passed, ${fail} failed (${((Date.now() - t0) / 1000).toFixed(1)} s in the browser)`);
process.exit(fail ? 1 : 0);

// ==== The demo model behind --api-key ====
async function realModel() {
  const page = await browser.newPage();
  watchPage(page, 'real');
  await page.setViewport({ width: 1280, height: 800 });
  await page.goto(REAL + '/', { timeout: T });

  // the key: /props answers 401, the page asks; a wrong key is refused and asked again
  await page.waitForSelector('#key-dialog[open]', { timeout: T });
  check((await text(page, '#key-reason')).includes('needs an API key'), 'key dialog reason');
  await page.type('#key-input', 'wrong-key');
  await page.click('#key-form button[type=submit]');
  await page.waitForFunction(() => document.getElementById('key-dialog').open &&
    document.getElementById('key-reason').textContent.includes('refused'), { timeout: T });
  await page.type('#key-input', KEY);
  await page.click('#key-form button[type=submit]');
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'wordnet-chat-16m',
    { timeout: T });
  check(await page.evaluate(() => localStorage.getItem('mlxcel.apiKey.v1')) === KEY, 'key kept in localStorage');
  check((await text(page, '#model-meta')).includes('ctx 512'), 'context size from /props shown: ' +
    await text(page, '#model-meta'));

  // settings: the placeholders are the server's defaults; temperature 0 makes the reply greedy
  await page.click('#open-settings');
  await page.waitForSelector('#settings-dialog[open]');
  check(await page.$eval('#set-temperature', (e) => e.placeholder) === '0.8', 'server default temperature shown');
  await page.type('#set-temperature', '0');
  await page.click('#settings-form button[type=submit]');
  await page.waitForSelector('#settings-dialog:not([open])');
  check(await page.evaluate(() => JSON.parse(localStorage.getItem('mlxcel.settings.v1')).temperature) === 0,
    'settings saved');

  // A reply streamed token by token: several growing texts, ending in the server's own answer.
  // This question gets the demo model's longer answers (104 tokens, greedy): at a few ms a
  // token on a quiet machine that is still several of the page's frames (it paints once a frame).
  const q = 'What are the kinds of "tree"?';
  await recordStates(page);
  await page.type('#input', q);
  await page.keyboard.press('Enter');
  await waitReply(page, 0);
  const reply = norm(await text(page, `${lastAssistant} .body`));
  const seen = await states(page);
  const ref = await (await fetch(REAL + '/v1/chat/completions', {
    method: 'POST',
    headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: q }], temperature: 0 }),
  })).json();
  check(reply.length > 0 && reply === norm(ref.choices[0].message.content),
    `streamed reply equals the server's greedy answer:\n  page: ${reply}\n  api:  ${ref.choices[0].message.content}`);
  check(seen.length >= 3, `streamed in several steps (${seen.length} distinct texts seen)`);
  console.log(`real model: ${seen.length} distinct texts of the reply seen while it streamed`);
  check(seen.every((s, i) => i === 0 || norm(s).startsWith(norm(seen[i - 1]))), 'each text extends the one before');
  const meta = await text(page, `${lastAssistant} .meta`);
  const m = meta.match(/^(\d+) tokens · ([\d.]+) tok\/s · (\d+)\/512 context$/);
  check(m && Number(m[1]) === ref.usage.completion_tokens && Number(m[2]) > 0 &&
    Number(m[3]) === ref.usage.total_tokens, `tokens, tok/s and context of the reply (${meta}; usage says ` +
    `${ref.usage.completion_tokens} of ${ref.usage.total_tokens})`);
  check(/^[\d.]+ tok\/s$/.test(await text(page, '#speed')), 'tok/s of the last reply in the top bar');

  // the key is asked again when a chat request gets 401 (key forgotten in the settings)
  await page.click('#open-settings');
  await page.waitForSelector('#settings-dialog[open]');
  await page.click('#forget-key');
  await page.click('#settings-cancel');
  await page.waitForSelector('#settings-dialog:not([open])');
  const before = await nArticles(page);
  await send(page, 'Define happiness.');
  await page.waitForSelector('#key-dialog[open]', { timeout: T });
  await page.type('#key-input', KEY);
  await page.click('#key-form button[type=submit]');
  await waitReply(page, before);
  check(await page.$eval(lastAssistant, (e) => e.dataset.state) === 'done' &&
    norm(await text(page, `${lastAssistant} .body`)).length > 0, 'reply after the key was given again');

  // a reload finds the conversation, its title, texts and statistics
  await page.reload({ timeout: T });
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'wordnet-chat-16m',
    { timeout: T });
  check(!(await page.$('#key-dialog[open]')), 'no key prompt after a reload (key stored)');
  const titles = await page.$$eval('#conv-list .conv-title', (b) => b.map((x) => x.textContent));
  check(titles.length === 1 && titles[0] === q, 'conversation listed after reload: ' + JSON.stringify(titles));
  check(norm(await text(page, 'article.user .body')) === q, 'question shown after reload');
  check(norm(await text(page, 'article.assistant .body')) === reply, 'reply shown after reload');
  check(await text(page, 'article.assistant .meta') === meta, 'reply statistics kept');

  if (SHOTS) await screenshots(page);
  await page.close();
}

// The pictures in docs/: a second conversation, then the page at desktop and phone width.
async function screenshots(page) {
  await page.click('#new-chat');
  for (const q of ['What does "ocean" mean?', 'What part of speech is "quickly"?']) {
    const n = await nArticles(page);
    await send(page, q);
    await waitReply(page, n);
  }
  await page.screenshot({ path: path.join(SHOTS, 'webui-desktop.png') });
  await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await sleep(300);
  await page.screenshot({ path: path.join(SHOTS, 'webui-phone.png') });
  await page.setViewport({ width: 1280, height: 800 });
}

// ==== The echo backend: HTML in a reply, thinking, stop ====
async function fakeEcho() {
  const page = await browser.newPage();
  watchPage(page, 'fake');
  await page.setViewport({ width: 1280, height: 800 });
  await page.goto(FAKE + '/', { timeout: T });
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'fake-echo', { timeout: T });

  // HTML and markdown in the model's reply: rendered as text, markdown as elements
  const hostile = [
    '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"><iframe src="/props"></iframe>',
    'Some **bold** and `<b>code</b>` and [a link](https://example.com/x) and [bad](javascript:window.__xss=3).',
    '```js',
    'const a = "<b>not bold</b>";',
    '```',
  ].join('\n');
  await recordStates(page);
  await send(page, hostile);
  await waitReply(page, 0);
  const r = await page.$eval(lastAssistant, (a) => ({
    text: a.querySelector('.body').textContent,
    elements: [...a.querySelectorAll('.body *')].map((e) => e.tagName.toLowerCase()),
    strong: [...a.querySelectorAll('.body strong')].map((e) => e.textContent),
    code: [...a.querySelectorAll('.body pre code')].map((e) => e.textContent),
    links: [...a.querySelectorAll('.body a')].map((e) => e.getAttribute('href')),
    xss: window.__xss,
    scripts: document.scripts.length,
  }));
  const echoed = await (await fetch(FAKE + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: hostile }] }),
  })).json();
  check(echoed.choices[0].message.content === hostile, 'the fake backend echoes the message (the reply holds HTML)');
  check(r.text.includes('<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'),
    'a <script> and <img onerror> in the reply show as text');
  check(!r.elements.some((t) => ['script', 'img', 'iframe', 'b'].includes(t)),
    'no element made from the reply\'s HTML: ' + r.elements.join(','));
  check(r.xss === undefined && r.scripts === 1, 'nothing from the reply ran');
  check(r.strong.length === 1 && r.strong[0] === 'bold', 'markdown **bold** rendered');
  check(r.code.length === 1 && r.code[0] === 'const a = "<b>not bold</b>";', 'fenced code block rendered as text');
  check(JSON.stringify(r.links) === '["https://example.com/x"]', 'only the http(s) link is a link: ' + r.links);
  check((await text(page, 'article.user .body')) === hostile, 'the user\'s message shows as typed');
  const nStates = (await states(page)).length;
  check(nStates >= 10, `reply streamed in many steps (${nStates})`);
  console.log(`echo backend: ${nStates} distinct texts of the reply seen while it streamed`);

  // <think>...</think> in the content: folded away, the answer shown
  let n = await nArticles(page);
  await send(page, '<think>The user wants the number.</think>The answer is 42.');
  await waitReply(page, n);
  const t = await page.$eval(lastAssistant, (a) => ({
    open: a.querySelector('details.reasoning').open,
    hidden: a.querySelector('details.reasoning').hidden,
    reasoning: a.querySelector('details.reasoning .md').textContent,
    body: a.querySelector('.body').textContent,
  }));
  check(!t.hidden && !t.open && t.reasoning === 'The user wants the number.' && t.body === 'The answer is 42.',
    'thinking folded in <details>: ' + JSON.stringify(t));

  // reasoning_content, as llama-server sends for thinking models (this server never does: the
  // one reply below is canned by the browser's request interception, answered instead of the
  // server), and llama-server's `timings`, which the page prefers for tok/s
  const canned = [
    { choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] },
    { choices: [{ index: 0, delta: { reasoning_content: 'Weighing ' } }] },
    { choices: [{ index: 0, delta: { reasoning_content: 'the <b>options</b>.' } }] },
    { choices: [{ index: 0, delta: { content: 'Pick **B**.' } }] },
    { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], timings: { predicted_per_second: 123.4 } },
    { choices: [], usage: { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 } },
  ].map((o) => `data: ${JSON.stringify(o)}\n\n`).join('') + 'data: [DONE]\n\n';
  await page.setRequestInterception(true);
  const onRequest = (req) => {
    if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions'))
      req.respond({ status: 200, contentType: 'text/event-stream', body: canned });
    else req.continue();
  };
  page.on('request', onRequest);
  n = await nArticles(page);
  await send(page, 'Which option?');
  await waitReply(page, n);
  page.off('request', onRequest);
  await page.setRequestInterception(false);
  const rc = await page.$eval(lastAssistant, (a) => ({
    open: a.querySelector('details.reasoning').open,
    reasoning: a.querySelector('details.reasoning .md').textContent,
    b: a.querySelectorAll('details.reasoning b').length,
    body: a.querySelector('.body').textContent,
    meta: a.querySelector('.meta').textContent,
  }));
  check(!rc.open && rc.reasoning === 'Weighing the <b>options</b>.' && rc.b === 0 && rc.body === 'Pick B.',
    'reasoning_content folded in <details>, as text: ' + JSON.stringify(rc));
  check(rc.meta === '4 tokens · 123.4 tok/s · 9/8192 context', 'usage tokens and the server\'s timings shown: ' + rc.meta);

  // stop: the fetch is aborted, the server cancels the request and generates no more
  const m0 = await metrics(FAKE);
  n = await nArticles(page);
  const long = 'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(50); // 2850 bytes: 28 s
  await send(page, long);
  await page.waitForFunction(() => {
    const a = document.querySelectorAll('#messages article.assistant .body');
    return a.length && a[a.length - 1].textContent.length >= 60;
  }, { timeout: T });
  check(!(await page.$eval('#stop', (e) => e.hidden)), 'stop button shown while streaming');
  await page.click('#stop');
  await page.waitForFunction(() => !document.getElementById('send').hidden, { timeout: T });
  const stoppedText = await text(page, `${lastAssistant} .body`);
  let m1;
  for (let i = 0; i < 50; i++) { // the server notices the closed connection before its next step
    m1 = await metrics(FAKE);
    if (m1.cancelled === m0.cancelled + 1 && m1.running === 0) break;
    await sleep(100);
  }
  check(m1.cancelled === m0.cancelled + 1, `server counted the request cancelled (${m0.cancelled} -> ${m1.cancelled})`);
  check(m1.running === 0, 'no request running after stop');
  await sleep(500);
  const m2 = await metrics(FAKE);
  check(m2.predicted === m1.predicted, `no token generated after the cancel (${m1.predicted} -> ${m2.predicted})`);
  const slots = await (await fetch(FAKE + '/slots')).json();
  check(slots.every((s) => !s.is_processing), '/slots: no slot processing');
  check(stoppedText.length >= 60 && stoppedText.length < long.length / 2,
    `partial reply kept (${stoppedText.length} of ${long.length} bytes)`);
  check(await text(page, `${lastAssistant} .body`) === stoppedText, 'reply no longer grows');
  check((await text(page, `${lastAssistant} .meta`)).endsWith('stopped'), 'reply marked stopped');

  // rename, delete, reload: the list and the stopped reply are kept
  await page.click('#new-chat');
  await send(page, 'short lived');
  await waitReply(page, 0);
  check((await page.$$('#conv-list li')).length === 2, 'second conversation listed');
  await page.click('#conv-list li.active .rename');
  await page.$eval('#conv-list .rename-input', (i) => { i.value = ''; });
  await page.type('#conv-list .rename-input', 'to delete');
  await page.keyboard.press('Enter');
  check(await text(page, '#conv-list li.active .conv-title') === 'to delete', 'renamed');
  await page.click('#conv-list li.active .delete'); // confirm() accepted by watchPage
  await page.reload({ timeout: T });
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'fake-echo', { timeout: T });
  const titles = await page.$$eval('#conv-list .conv-title', (b) => b.map((x) => x.textContent));
  check(titles.length === 1 && titles[0].startsWith('<script>'), 'after delete + reload one conversation: ' + titles);
  await page.click('#conv-list .conv-title');
  check(await text(page, `${lastAssistant} .body`) === stoppedText, 'stopped reply kept after reload');

  // phone width: the list is a drawer, nothing overflows sideways
  await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
  await sleep(300);
  const box = () => page.$eval('#sidebar', (s) => s.getBoundingClientRect().right);
  check(await box() <= 0, 'phone: conversation list hidden');
  check(await page.evaluate(() => document.documentElement.scrollWidth) <= 390, 'phone: no sideways scrolling');
  const composer = await page.$eval('#composer', (c) => c.getBoundingClientRect().bottom);
  check(composer <= 844, 'phone: composer on screen');
  await page.click('#toggle-sidebar');
  await sleep(400);
  check(await box() > 200, 'phone: menu button opens the list');
  await page.click('#conv-list .conv-title');
  await sleep(400);
  check(await box() <= 0, 'phone: choosing a conversation closes the list');
  await page.close();
}
