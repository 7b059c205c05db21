// Embeddings end to end with the official `openai` package and fetch (see embed_e2e.sh).
// usage: node embed_e2e.mjs PORT_MAIN PORT_NONE PORT_MEAN PORT_OFF
// main: --embeddings (pooling last), aliases demo,demo2, -np 4, --max-queue-depth 8, -c 256;
// none: --pooling none; mean: pooling mean from the checkpoint's 1_Pooling; off: no --embeddings.
import OpenAI from "openai";

const [pMain, pNone, pMean, pOff] = process.argv.slice(2);
const url = (p) => `http://127.0.0.1:${p}`;
const client = new OpenAI({ baseURL: `${url(pMain)}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const DIM = 384;
let failures = 0, passed = 0;

function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL: ${what}`);
}

async function post(port, path, body) {
  const r = await fetch(url(port) + path, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body), signal: AbortSignal.timeout(120_000),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* left null */ }
  return { status: r.status, json, text, headers: r.headers };
}

const tokenize = async (text) => (await post(pMain, "/tokenize", { content: text, add_special: true })).json.tokens;
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
// float32 values equal: JSON numbers carry 9 significant digits (Math.fround gives the float back)
const same = (a, b) => a.length === b.length && a.every((x, i) => Math.fround(x) === Math.fround(b[i]));
// llama.cpp's L2 normalization in float: x * float(1 / sqrt(sum of float squares))
function l2(v) {
  v = v.map(Math.fround); // the float values the JSON numbers stand for
  let s = 0;
  for (const x of v) s += Math.fround(x * x);
  const k = Math.fround(1 / Math.sqrt(s));
  return v.map((x) => Math.fround(x * k));
}
function b64floats(s) {
  const buf = Buffer.from(s, "base64");
  const out = [];
  for (let i = 0; i < buf.length; i += 4) out.push(buf.readFloatLE(i));
  return out;
}
async function expectError(port, path, body, status, param, msgPart, what) {
  const r = await post(port, path, body);
  const e = r.json && r.json.error;
  const ok = r.status === status && e && e.code === status && (param === null || e.param === param) &&
    (!msgPart || (e.message || "").includes(msgPart));
  check(ok, `${what}: want ${status}${param ? " param " + param : ""}${msgPart ? ` '${msgPart}'` : ""}, got ${r.status} ${r.text.slice(0, 300)}`);
}

const TEXTS = ["the ocean is deep", "a river runs through the valley", "music", "quiet mountain forest at dawn",
  "windows and doors"];

// ==== the SDK: a string, base64 (its default, decoded) and float ====
const one = await client.embeddings.create({ model: "demo", input: TEXTS[0] });
check(one.object === "list" && one.data.length === 1, "one input: a list of one");
check(one.data[0].object === "embedding" && one.data[0].index === 0, "data[0] object and index");
const v0 = Array.from(one.data[0].embedding);
check(v0.length === DIM, `the SDK decoded ${v0.length} values, want ${DIM}`);
check(Math.abs(norm(v0) - 1) < 1e-5, `L2-normalized by default (norm ${norm(v0)})`);
const ids0 = await tokenize(TEXTS[0]);
check(one.usage.prompt_tokens === ids0.length && one.usage.total_tokens === ids0.length,
  `usage ${JSON.stringify(one.usage)} = ${ids0.length} tokens`);
check(one.model === "demo", "model echoed");
const flt = await client.embeddings.create({ model: "demo2", input: TEXTS[0], encoding_format: "float" });
check(Array.isArray(flt.data[0].embedding) && same(flt.data[0].embedding, v0), "float equals base64 (SDK-decoded)");
check(flt.model === "demo2", "the alias asked for is answered");
const raw64 = await post(pMain, "/v1/embeddings", { input: TEXTS[0], encoding_format: "base64", model: "x" });
check(raw64.status === 200 && typeof raw64.json.data[0].embedding === "string", "base64: a string");
check(same(b64floats(raw64.json.data[0].embedding), v0), "base64 bytes are the little-endian float32 values");
check(raw64.json.model === "demo", "an unknown model name is answered as the first alias");

// ==== a list = each alone; token arrays = their text ====
const alone = [];
for (const t of TEXTS) alone.push(Array.from((await client.embeddings.create({ model: "demo", input: t })).data[0].embedding));
const list = await client.embeddings.create({ model: "demo", input: TEXTS });
check(list.data.length === TEXTS.length && list.data.every((d, i) => d.index === i), "list: one result per input, in order");
check(list.data.every((d, i) => same(Array.from(d.embedding), alone[i])), "list: each equals the input alone");
const allIds = [];
for (const t of TEXTS) allIds.push(await tokenize(t));
check(list.usage.prompt_tokens === allIds.reduce((s, a) => s + a.length, 0), "list usage sums the inputs' tokens");
const byIds = await client.embeddings.create({ model: "demo", input: ids0 });
check(same(Array.from(byIds.data[0].embedding), v0), "a token array equals its text");
const byIdLists = await client.embeddings.create({ model: "demo", input: allIds.slice(1, 3) });
check(byIdLists.data.length === 2 && same(Array.from(byIdLists.data[1].embedding), alone[2]), "token arrays equal their texts");
const mixed = await post(pMain, "/v1/embeddings", { input: [...ids0.slice(0, 2), " and more"] });
check(mixed.status === 200 && mixed.json.data.length === 1, "llama-server's mixed prompt (ids and a string) is one input");

// ==== dimensions: the first n values, normalized again ====
const rawMain = await post(pMain, "/embedding", { content: TEXTS[0], embd_normalize: -1 });
const raw0 = rawMain.json[0].embedding[0];
check(same(l2(raw0), v0), "the default vector is llama.cpp's L2 normalization of the raw one");
const d64 = await client.embeddings.create({ model: "demo", input: TEXTS[0], dimensions: 64, encoding_format: "float" });
check(d64.data[0].embedding.length === 64 && same(d64.data[0].embedding, l2(raw0.slice(0, 64))), "dimensions 64");

// ==== llama-server's shapes and embd_normalize ====
const ls = await post(pMain, "/embedding", { content: TEXTS[0] });
check(ls.status === 200 && Array.isArray(ls.json) && ls.json.length === 1 && ls.json[0].index === 0, "/embedding: an array of {index, embedding}");
check(Array.isArray(ls.json[0].embedding) && ls.json[0].embedding.length === 1 && same(ls.json[0].embedding[0], v0),
  "/embedding: embedding is [[vector]], the /v1 vector");
const ls2 = await post(pMain, "/embeddings", { input: TEXTS.slice(0, 2) });
check(ls2.status === 200 && ls2.json.length === 2 && same(ls2.json[1].embedding[0], alone[1]), "/embeddings with a list");
const viaContent = await post(pMain, "/v1/embeddings", { content: TEXTS[0] });
check(Array.isArray(viaContent.json) && same(viaContent.json[0].embedding[0], v0), "`content` gets llama-server's shape");
const maxAbs = (await post(pMain, "/embedding", { content: TEXTS[0], embd_normalize: 0 })).json[0].embedding[0];
check(Math.abs(Math.max(...maxAbs.map(Math.abs)) - 32760) < 0.01, "embd_normalize 0: max absolute scaled to 32760");
const taxi = (await post(pMain, "/embedding", { content: TEXTS[0], embd_normalize: 1 })).json[0].embedding[0];
check(Math.abs(taxi.reduce((s, x) => s + Math.abs(x), 0) - 1) < 1e-5, "embd_normalize 1: taxicab norm 1");

// ==== concurrency, and a batch larger than the window and the queue limit ====
// 5 requests of 3 inputs at once with -np 4 and --max-queue-depth 8: 15 sequences, but a request's
// inputs after its first only take free slots, so none is refused as a full queue
const conc = await Promise.all(TEXTS.map((t, i) =>
  client.embeddings.create({ model: "demo", input: [t, TEXTS[(i + 1) % 5], TEXTS[(i + 2) % 5]] })));
check(conc.every((r, i) => r.data.every((d, k) => same(Array.from(d.embedding), alone[(i + k) % 5]))),
  "5 concurrent requests of 3 inputs: each equals the inputs alone");
const big = [];
for (let i = 0; i < 120; i++) big.push(`${TEXTS[i % 5]} number ${i}`);
const bigR = await client.embeddings.create({ model: "demo", input: big });
check(bigR.data.length === 120, "120 inputs with -np 4 and --max-queue-depth 8: all answered");
const b7 = await client.embeddings.create({ model: "demo", input: big[7] });
check(same(Array.from(bigR.data[7].embedding), Array.from(b7.data[0].embedding)), "input 7 of 120 equals it alone");

// ==== errors ====
await expectError(pMain, "/v1/embeddings", {}, 400, "input", "\"input\" or \"content\" must be provided", "no input");
await expectError(pMain, "/v1/embeddings", { input: "" }, 400, "input", "empty string", "empty string");
await expectError(pMain, "/v1/embeddings", { input: [] }, 400, "input", "empty array", "empty array");
await expectError(pMain, "/v1/embeddings", { input: ["ok", ""] }, 400, "input", "input[1]", "an empty element");
await expectError(pMain, "/v1/embeddings", { input: [[]] }, 400, "input", "input[0]", "an empty id array");
await expectError(pMain, "/v1/embeddings", { input: 5 }, 400, "input", "expected a string", "a number");
await expectError(pMain, "/v1/embeddings", { input: [1.5] }, 400, "input", "input[0]", "a real");
await expectError(pMain, "/v1/embeddings", { input: [99999999] }, 400, "input", "outside the vocabulary", "an id out of range");
await expectError(pMain, "/v1/embeddings", { input: "x", encoding_format: "int8" }, 400, "encoding_format", "float or base64", "encoding_format");
await expectError(pMain, "/v1/embeddings", { input: "x", dimensions: 0 }, 400, "dimensions", "from 1 to 384", "dimensions 0");
await expectError(pMain, "/v1/embeddings", { input: "x", dimensions: 385 }, 400, "dimensions", "from 1 to 384", "dimensions 385");
await expectError(pMain, "/v1/embeddings", { input: "x", dimensions: "8" }, 400, "dimensions", null, "dimensions as a string");
await expectError(pMain, "/v1/embeddings", { input: "x", embd_normalize: "2" }, 400, "embd_normalize", null, "embd_normalize type");
await expectError(pMain, "/v1/embeddings", { input: "x", model: 5 }, 400, "model", null, "model type");
await expectError(pMain, "/v1/embeddings", { input: "x", user: 5 }, 400, "user", null, "user type");
await expectError(pMain, "/embedding", { content: "x", encoding_format: "base64" }, 400, "encoding_format", "base64", "base64 on /embedding");
await expectError(pMain, "/v1/embeddings", "{nope", 400, "body", "invalid JSON", "invalid JSON");
await expectError(pMain, "/v1/embeddings", { input: "word ".repeat(300) }, 400, "input", "context of 256 tokens", "longer than the context");
await expectError(pMain, "/v1/embeddings", { input: new Array(2049).fill("a") }, 400, "input", "at most 2048", "2049 inputs");
const get = await fetch(url(pMain) + "/v1/embeddings");
check(get.status === 405 && get.headers.get("allow") === "POST, OPTIONS", "GET /v1/embeddings: 405 with Allow");
let thrown = null;
try { await client.embeddings.create({ model: "demo", input: "" }); } catch (e) { thrown = e; }
check(thrown instanceof OpenAI.BadRequestError && thrown.status === 400, "the SDK raises BadRequestError for an empty input");
const fits = await client.embeddings.create({ model: "demo", input: (await tokenize("word ".repeat(300))).slice(0, 256) });
check(fits.data[0].embedding.length === DIM, "an input that fills the context (256 tokens) is embedded");

// ==== embedding mode refuses generation (llama-server), keeps the text routes ====
const noGen = "This server does not support completions. Start it without `--embeddings`";
await expectError(pMain, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] }, 501, null, noGen, "chat in embedding mode");
await expectError(pMain, "/v1/completions", { prompt: "hi" }, 501, null, noGen, "completions in embedding mode");
await expectError(pMain, "/completion", { prompt: "hi" }, 501, null, noGen, "/completion in embedding mode");
check((await post(pMain, "/tokenize", { content: "hi" })).status === 200, "/tokenize works in embedding mode");
const models = await client.models.list();
check(models.data[0].meta && models.data[0].meta.n_embd === DIM, "/v1/models meta.n_embd");

// ==== pooling none: per-token vectors; its last row is main's raw vector ====
await expectError(pNone, "/v1/embeddings", { input: "x" }, 400, null, "Pooling type 'none' is not OAI compatible", "/v1 with pooling none");
const none = await post(pNone, "/embedding", { content: TEXTS[0] });
const rows = none.json && none.json[0].embedding;
check(Array.isArray(rows) && rows.length === ids0.length && rows.every((r) => r.length === DIM), `none: ${ids0.length} rows of ${DIM}`);
check(same(rows[rows.length - 1], raw0), "none: the last row is the last-pooled raw vector (not normalized)");
const noneNorm = await post(pNone, "/embedding", { content: TEXTS[0], embd_normalize: 2 });
check(same(noneNorm.json[0].embedding[0], rows[0]), "none: embd_normalize leaves per-token vectors as they are (llama-server)");

// ==== mean pooling (from 1_Pooling/config.json) = the mean of the per-token rows ====
const meanRaw = (await post(pMean, "/embedding", { content: TEXTS[0], embd_normalize: -1 })).json[0].embedding[0];
const want = new Array(DIM).fill(0).map((_, i) => Math.fround(rows.reduce((s, r) => s + Math.fround(r[i]), 0) / rows.length));
check(same(meanRaw, want), "mean pooling equals the mean of the per-token states (bit for bit)");
const meanV1 = new OpenAI({ baseURL: `${url(pMean)}/v1`, apiKey: "unused", maxRetries: 0 });
const mv = await meanV1.embeddings.create({ model: "m", input: TEXTS[0] });
check(same(Array.from(mv.data[0].embedding), l2(want)), "mean server /v1: the normalized mean");

// ==== without --embeddings (llama-server: 501) ====
const noEmb = "This server does not support embeddings. Start it with `--embeddings`";
await expectError(pOff, "/v1/embeddings", { input: "x" }, 501, null, noEmb, "/v1/embeddings without --embeddings");
await expectError(pOff, "/embedding", { content: "x" }, 501, null, noEmb, "/embedding without --embeddings");
const gen = await post(pOff, "/completion", { prompt: "the ocean", n_predict: 2 });
check(gen.status === 200 && gen.json.tokens_predicted >= 1, "generation works without --embeddings");

console.log(`embed_e2e.mjs: ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
