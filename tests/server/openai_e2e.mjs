// End-to-end checks with the official `openai` npm package against a running server.
// usage: node openai_e2e.mjs BASE_URL [MODEL]   (e.g. http://127.0.0.1:PORT; MODEL: the served id,
// default fake-model). Runs against the fake backend and against a real tiny model.
// Every wait is bounded; the process exits non-zero on the first failed check.
import OpenAI from "openai";

const base = process.argv[2];
const MODEL = process.argv[3] ?? "fake-model";
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
let failures = 0, passed = 0;

function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL: ${what}`);
}

async function metric(name) {
  const r = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) });
  const text = await r.text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

// Polls until every KV block is free (the engine thread frees them within a step or two).
async function kvAllFree() {
  for (let i = 0; i < 100; i++) {
    const used = await metric("mlxcel_kv_blocks_used");
    const free = await metric("mlxcel_kv_blocks_free");
    const cap = await metric("mlxcel_kv_blocks_capacity");
    if (used === 0 && free === cap && cap > 0) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

async function chatStream(messages, opts = {}) {
  const stream = await client.chat.completions.create({
    model: MODEL, messages, temperature: 0, max_tokens: opts.max_tokens ?? 24, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0, role = null;
  for await (const ch of stream) {
    check(ch.object === "chat.completion.chunk", "chunk object");
    if (ch.usage) usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    if (c.delta.role) role = c.delta.role;
    if (c.delta.content) { text += c.delta.content; chunks++; }
    // Leaving the loop makes the client abort the HTTP request: the server sees a disconnect.
    if (opts.stopAfter && chunks === opts.stopAfter) return null;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage, role };
}

// ==== models ====
const models = await client.models.list();
check(models.data.length >= 1 && models.data[0].id === MODEL, "models.list returns the served model");
const retrieved = await client.models.retrieve(MODEL); // GET /v1/models/{id}
check(retrieved.id === MODEL && retrieved.object === "model" && typeof retrieved.created === "number", "models.retrieve returns the model");
let notFound = null;
try { await client.models.retrieve("no-such-model"); } catch (e) { notFound = e; }
check(notFound instanceof OpenAI.NotFoundError && notFound.status === 404 && notFound.error?.code === 404,
      `models.retrieve of an unknown id throws NotFoundError (${notFound})`);

// ==== chat, non-stream and stream give the same greedy text ====
const msgs = [{ role: "system", content: "be brief" }, { role: "user", content: "Hello there" }];
const full = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_tokens: 24 });
check(full.object === "chat.completion", "chat object");
check(full.id.startsWith("chatcmpl-"), "chat id prefix");
const msg = full.choices[0].message;
check(msg.role === "assistant" && typeof msg.content === "string" && msg.content.length > 0, "chat message");
check(["stop", "length"].includes(full.choices[0].finish_reason), "chat finish_reason");
check(full.usage.total_tokens === full.usage.prompt_tokens + full.usage.completion_tokens, "chat usage sums");
const st = await chatStream(msgs);
check(st.role === "assistant", "stream starts with the assistant role");
check(st.text === msg.content, `stream text equals non-stream text ('${st.text}' vs '${msg.content}')`);
check(st.finish === full.choices[0].finish_reason, "stream finish_reason equals non-stream");
check(st.usage && st.usage.completion_tokens === full.usage.completion_tokens, "stream usage (include_usage)");

// max_completion_tokens limits like max_tokens
const mct = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_completion_tokens: 3 });
check(mct.usage.completion_tokens <= 3, "max_completion_tokens bounds the output");

// logprobs with top_logprobs
const lp = await client.chat.completions.create({
  model: MODEL, messages: msgs, temperature: 0, max_tokens: 4, logprobs: true, top_logprobs: 2,
});
const content = lp.choices[0].logprobs?.content ?? [];
check(content.length === lp.usage.completion_tokens, "one logprobs entry per token");
check(content.every((e) => typeof e.logprob === "number" && e.top_logprobs.length === 2 && Array.isArray(e.bytes)),
  "logprobs entries have logprob, bytes and 2 top_logprobs");

// ==== completions: stop string cuts the greedy text before its first occurrence ====
const c1 = await client.completions.create({ model: MODEL, prompt: "Once upon a time", temperature: 0, max_tokens: 32, seed: 7 });
check(c1.object === "text_completion" && c1.choices[0].text.length > 0, "completion text");
const t1 = c1.choices[0].text;
if (t1.length >= 6) {
  const stop = t1.slice(3, 5);
  const c2 = await client.completions.create({ model: MODEL, prompt: "Once upon a time", temperature: 0, max_tokens: 32, stop: [stop] });
  check(c2.choices[0].text === t1.slice(0, t1.indexOf(stop)), `stop '${stop}' cuts the text`);
  check(c2.choices[0].finish_reason === "stop", "stop string gives finish_reason stop");
  const cs = await client.completions.create({ model: MODEL, prompt: "Once upon a time", temperature: 0, max_tokens: 32, stop: [stop], stream: true });
  let txt = "", fin = null;
  for await (const ch of cs) { txt += ch.choices[0]?.text ?? ""; fin = ch.choices[0]?.finish_reason ?? fin; }
  check(txt === t1.slice(0, t1.indexOf(stop)) && fin === "stop", "streamed completion honours the stop string");
}
// seeded sampling is reproducible
const s1 = await client.completions.create({ model: MODEL, prompt: "abc", temperature: 0.9, max_tokens: 16, seed: 42 });
const s2 = await client.completions.create({ model: MODEL, prompt: "abc", temperature: 0.9, max_tokens: 16, seed: 42 });
check(s1.choices[0].text === s2.choices[0].text, "same seed, same sample");

// ==== n choices and lists of prompts ====
// Choice i samples with seed + i, so choice 0 of n is the n = 1 answer; a list of prompts gives
// n choices per prompt, in prompt order, each equal to that prompt asked alone.
const one = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 1, max_tokens: 12, seed: 7 });
const three = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 1, max_tokens: 12, seed: 7, n: 3 });
check(three.choices.length === 3 && three.choices.every((c, i) => c.index === i), "n = 3 gives choices 0, 1, 2");
check(three.choices[0].message.content === one.choices[0].message.content, "choice 0 of n = 3 is the n = 1 sample");
check(three.usage.prompt_tokens === one.usage.prompt_tokens, "n = 3 counts the prompt once");
check(new Set(three.choices.map((c) => c.message.content)).size > 1, "n = 3 samples differ (seed + i)");
{
  const st = await client.chat.completions.create({
    model: MODEL, messages: msgs, temperature: 1, max_tokens: 12, seed: 7, n: 3, stream: true,
    stream_options: { include_usage: true },
  });
  const text = ["", "", ""], fin = [null, null, null];
  let usage = null;
  for await (const ch of st) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.content) text[c.index] += c.delta.content;
      if (c.finish_reason) fin[c.index] = c.finish_reason;
    }
  }
  check(text.every((t, i) => t === three.choices[i].message.content), "n = 3 streamed per index equals non-stream");
  check(fin.every((f, i) => f === three.choices[i].finish_reason), "n = 3 stream finish_reason per index");
  check(usage && usage.completion_tokens === three.usage.completion_tokens, "n = 3 stream usage");
}
{
  const alone = [];
  for (const p of ["abc", "xyz"]) alone.push((await client.completions.create({ model: MODEL, prompt: p, temperature: 0, max_tokens: 8 })).choices[0].text);
  const both = await client.completions.create({ model: MODEL, prompt: ["abc", "xyz"], temperature: 0, max_tokens: 8, n: 2 });
  check(both.choices.length === 4 && both.choices.every((c, i) => c.index === i), "2 prompts x n = 2 give 4 choices");
  check(both.choices.every((c, i) => c.text === alone[i >> 1]), "each prompt's choices equal it asked alone");
}
check(await kvAllFree(), "every KV block free after the n > 1 requests");

// ==== errors surface as the client's typed errors ====
try {
  await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 5 });
  check(false, "temperature 5 must be rejected");
} catch (e) {
  check(e.status === 400 && /temperature/.test(e.message), `400 naming temperature (${e.status} ${e.message})`);
}

// ==== 64 concurrent greedy streams equal the same requests run alone ====
const N = 64;
const prompts = Array.from({ length: N }, (_, i) => [{ role: "user", content: `prompt number ${i} ${"x".repeat(i % 7)}` }]);
const alone = [];
for (let i = 0; i < N; i++) alone.push((await chatStream(prompts[i], { max_tokens: 32 })).text);
const together = await Promise.all(prompts.map((p) => chatStream(p, { max_tokens: 32 })));
let same = 0;
for (let i = 0; i < N; i++) same += together[i].text === alone[i] ? 1 : 0;
check(same === N, `64 concurrent streams equal their solo runs (${same}/${N})`);
check(await kvAllFree(), "every KV block free after 64 concurrent streams");

// ==== the same with a third of the clients disconnecting mid-stream ====
// A client that hangs up while its sequence runs must have it cancelled (KV freed). A client
// whose sequence already finished when it hung up (possible under CPU load: the server may
// generate all tokens before the client has read three) cannot be cancelled, so the check is
// an accounting: every request of the phase finishes exactly once, as "cancelled" or normally,
// and the aborted ones that were not cancelled are exactly the ones that finished normally.
// The deterministic "hang-up cancels within a step" check is in e2e.sh (slow fake engine).
async function finished() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = {};
  for (const [, r, v] of text.matchAll(/mlxcel_requests_finished_total\{reason="(\w+)"\} (\d+)/g)) m[r] = Number(v);
  const total = Object.values(m).reduce((a, b) => a + b, 0);
  return { total, cancelled: m.cancelled ?? 0 };
}
const before = await finished();
let aborted = 0;
const results = await Promise.all(prompts.map(async (p, i) => {
  if (i % 3 !== 0) return chatStream(p, { max_tokens: 32 });
  const r = await chatStream(p, { max_tokens: 200, stopAfter: 3 });
  if (r === null) aborted++;
  return r === null ? null : { ...r, short: true }; // ended (EOS) before 3 chunks: not aborted
}));
let ok = 0, expect = 0, completed = 0;
for (let i = 0; i < N; i++) {
  if (!results[i]) continue;
  completed++;
  if (results[i].short) continue;
  expect++;
  ok += results[i].text === alone[i] ? 1 : 0;
}
check(ok === expect, `streams that stayed equal their solo runs (${ok}/${expect})`);
check(await kvAllFree(), "every KV block free after a third of the clients disconnected");
let after = await finished();
for (let k = 0; k < 100 && after.total - before.total < N; k++) {
  await new Promise((r) => setTimeout(r, 50));
  after = await finished();
}
const cancelled = after.cancelled - before.cancelled;
const finishedNormally = after.total - before.total - cancelled;
check(after.total - before.total === N, `every request of the phase finished once (${after.total - before.total}/${N})`);
check(aborted > 0 && cancelled >= 1 && cancelled + (finishedNormally - completed) === aborted,
  `hung-up clients: ${aborted} aborted = ${cancelled} cancelled + ${finishedNormally - completed} finished before the hang-up`);

console.log(`openai e2e: ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
