// Structured output end to end with the official `openai` client and ajv, against `mlxcel serve`
// on the demo model (models/wordnet-chat-16m). usage: node structured_e2e.mjs BASE_URL MODEL
// Every constrained output must parse and validate (ajv, draft 2020-12 + ajv-formats); a bad
// schema or grammar is a 400 whose error names the field.
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const base = process.argv[2];
const MODEL = process.argv[3] ?? "wordnet-chat-16m";
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
let failures = 0, passed = 0;
function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL: ${what}`);
}
function validJSON(text, schema, what) {
  let v;
  try { v = JSON.parse(text); } catch (e) { check(false, `${what}: does not parse (${e.message}): ${JSON.stringify(text)}`); return; }
  const ok = ajv.validate(schema, v);
  check(ok, `${what}: does not validate (${ajv.errorsText()}): ${text}`);
}

const word = {
  type: "object",
  properties: {
    word: { type: "string", minLength: 1, maxLength: 16 },
    part_of_speech: { enum: ["noun", "verb", "adjective", "adverb"] },
    meanings: { type: "array", items: { type: "string", maxLength: 32 }, minItems: 1, maxItems: 2 },
    letters: { type: "integer", minimum: 1, maximum: 40 },
    checked: { type: "string", format: "date" },
    rare: { type: ["boolean", "null"] },
  },
  required: ["word", "part_of_speech", "meanings", "letters"],
  additionalProperties: false,
};
const msgs = [{ role: "user", content: 'What does "ocean" mean? Answer in JSON.' }];
const rf = { type: "json_schema", json_schema: { name: "word_entry", strict: true, schema: word } };

// ==== chat: non-stream and stream, greedy and sampled ====
for (const temperature of [0, 1]) {
  for (const seed of temperature ? [1, 2] : [0]) {
    const r = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature, seed, max_tokens: 200, response_format: rf });
    check(r.choices[0].finish_reason === "stop", `chat json_schema t=${temperature} seed=${seed}: finish_reason stop (${r.choices[0].finish_reason})`);
    validJSON(r.choices[0].message.content, word, `chat json_schema t=${temperature} seed=${seed}`);
  }
}
{
  const full = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_tokens: 200, response_format: rf });
  const st = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_tokens: 200, response_format: rf, stream: true });
  let text = "", fin = null;
  for await (const ch of st) {
    text += ch.choices[0]?.delta?.content ?? "";
    fin = ch.choices[0]?.finish_reason ?? fin;
  }
  validJSON(text, word, "chat json_schema stream");
  check(text === full.choices[0].message.content && fin === "stop", "stream equals non-stream (greedy)");
}
// json_object: any JSON object
{
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 1, seed: 5, max_tokens: 120, response_format: { type: "json_object" } });
  if (r.choices[0].finish_reason === "stop") validJSON(r.choices[0].message.content, { type: "object" }, "json_object");
  else check(r.choices[0].finish_reason === "length", "json_object: stop or length");
  const t = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, max_tokens: 20, response_format: { type: "text" } });
  check(typeof t.choices[0].message.content === "string", "response_format text is plain generation");
}
// n = 2 choices share the grammar
{
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 1, seed: 11, n: 2, max_tokens: 200, response_format: rf });
  check(r.choices.length === 2, "n = 2 with a schema");
  r.choices.forEach((c, i) => validJSON(c.message.content, word, `n = 2 choice ${i}`));
}
// legacy completions with response_format, and llama-server's json_schema field
{
  const r = await client.completions.create({ model: MODEL, prompt: "ocean:", temperature: 0.7, seed: 4, max_tokens: 200, response_format: rf });
  validJSON(r.choices[0].text, word, "completions response_format");
  const small = { type: "array", items: { type: "integer", minimum: -5, maximum: 5 }, minItems: 2, maxItems: 4 };
  const j = await (await fetch(`${base}/completion`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "numbers:", n_predict: 64, temperature: 1, seed: 3, json_schema: small }) })).json();
  check(j.stop_type === "eos", `/completion json_schema ends at the grammar's end (${j.stop_type})`);
  validJSON(j.content, small, "/completion json_schema");
}
// /completion with a GBNF grammar: the text matches an equivalent regular expression
{
  const grammar = 'root ::= ("yes" | "no") ", " [a-z]{1,8} "." (" " [0-9]{2})?';
  const re = /^(yes|no), [a-z]{1,8}\.( [0-9]{2})?$/;
  for (const seed of [1, 2, 3]) {
    const j = await (await fetch(`${base}/completion`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "Is the sea blue?", n_predict: 40, temperature: 1, seed, grammar }) })).json();
    check(re.test(j.content), `/completion grammar seed ${seed}: '${j.content}' matches ${re}`);
    check(j.stop_type === "eos", `/completion grammar seed ${seed}: stop_type eos (${j.stop_type})`);
  }
  // streamed
  const r = await fetch(`${base}/completion`, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Is the sea blue?", n_predict: 40, temperature: 1, seed: 9, grammar, stream: true }) });
  const sse = await r.text();
  const text = sse.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)).content ?? "").join("");
  check(re.test(text), `/completion grammar stream: '${text}'`);
}

// ==== refusals: 400 naming the field ====
async function refused(body, param, words, what, route = "chat") {
  try {
    if (route === "chat") await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 8, ...body });
    else await client.completions.create({ model: MODEL, prompt: "x", max_tokens: 8, ...body });
    check(false, `${what}: accepted`);
  } catch (e) {
    check(e.status === 400, `${what}: status ${e.status}`);
    check(e.error?.param === param, `${what}: param '${e.error?.param}', want '${param}'`);
    for (const w of words) check((e.error?.message ?? "").includes(w), `${what}: message lacks '${w}': ${e.error?.message}`);
  }
}
await refused({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "integer", multipleOf: 3 } } } },
  "response_format", ["response_format.json_schema.schema", "'multipleOf' is not supported"], "multipleOf");
await refused({ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string", format: "email" } } } } } },
  "response_format", ["schema at /properties/a", "format 'email'"], "format email");
await refused({ response_format: { type: "json_schema", json_schema: { name: "x" } } }, "response_format", ["json_schema.schema: required"], "no schema");
await refused({ response_format: { type: "json_schema", json_schema: { name: "x y", schema: {} } } }, "response_format", ["json_schema.name"], "bad name");
await refused({ response_format: { type: "json_schema", json_schema: { name: "x", schema: {}, extra: 1 } } }, "response_format", ["unknown field 'extra'"], "unknown field");
await refused({ response_format: { type: "xml" } }, "response_format", ["'xml' is not supported"], "type xml");
await refused({ response_format: { type: "json_object" }, grammar: 'root ::= "a"' }, "grammar", ["only one of"], "two constraints");
await refused({ grammar: "root ::= undefined-rule" }, "grammar", ["line 1 column 10", "undefined rule 'undefined-rule'"], "bad grammar", "completions");
await refused({ json_schema: { type: "string", pattern: "(?=a)" } }, "json_schema", ["lookahead"], "bad pattern", "completions");

console.log(`structured_e2e: ${passed} checks passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
