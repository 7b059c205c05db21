// Enforced tool calls end to end: `mlxcel serve --tool-call-parser hermes` on the demo model
// (models/wordnet-chat-16m, which was never trained to call tools), driven by the official
// `openai` client. tool_choice "required" / a named function constrain the reply to the Hermes
// call syntax with each tool's parameters schema, so even this model must answer with a call
// whose arguments validate (ajv). usage: node tools_enforced_e2e.mjs BASE_URL MODEL
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";

const base = process.argv[2];
const MODEL = process.argv[3] ?? "wordnet-chat-16m";
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const ajv = new Ajv2020({ strict: false });
let failures = 0, passed = 0;
function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL: ${what}`);
}

const weather = {
  type: "object",
  properties: { city: { type: "string", minLength: 1, maxLength: 20 }, unit: { enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const define = {
  type: "object",
  properties: { word: { type: "string", minLength: 1, maxLength: 16 }, max_senses: { type: "integer", minimum: 1, maximum: 3 } },
  required: ["word"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weather } },
  { type: "function", function: { name: "define_word", description: "WordNet senses of a word", parameters: define } },
];
const schemaOf = { get_weather: weather, define_word: define };
const msgs = [{ role: "user", content: 'What does "ocean" mean?' }];

function checkCalls(calls, what, onlyName) {
  check(Array.isArray(calls) && calls.length >= 1, `${what}: tool_calls present (${JSON.stringify(calls)})`);
  for (const c of calls ?? []) {
    check(c.type === "function" && /^call_/.test(c.id), `${what}: call id/type ${c.id} ${c.type}`);
    check(c.function.name in schemaOf, `${what}: a tool of the request (${c.function.name})`);
    if (onlyName) check(c.function.name === onlyName, `${what}: the named tool (${c.function.name})`);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) {
      check(false, `${what}: arguments parse (${e.message}): ${c.function.arguments}`);
      continue;
    }
    const schema = schemaOf[c.function.name];
    check(schema && ajv.validate(schema, args), `${what}: arguments validate (${ajv.errorsText()}): ${c.function.arguments}`);
  }
}

// required, greedy and sampled, with several calls allowed and with one
for (const [opts, what] of [
  [{ temperature: 0 }, "required greedy"],
  [{ temperature: 1.0, seed: 7 }, "required sampled"],
  [{ temperature: 0, parallel_tool_calls: false }, "required, parallel off"],
]) {
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, tool_choice: "required",
                                                   max_tokens: 200, ...opts });
  const m = r.choices[0].message;
  check(r.choices[0].finish_reason === "tool_calls", `${what}: finish_reason ${r.choices[0].finish_reason}`);
  check(m.content === null || m.content === "", `${what}: no text content (${JSON.stringify(m.content)})`);
  checkCalls(m.tool_calls, what);
  if (opts.parallel_tool_calls === false) check(m.tool_calls?.length === 1, `${what}: one call`);
}

// a named function: that one, whatever the prompt asks
for (const name of ["get_weather", "define_word"]) {
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, max_tokens: 200,
    tool_choice: { type: "function", function: { name } }, temperature: 0 });
  checkCalls(r.choices[0].message.tool_calls, `named ${name}`, name);
  check(r.choices[0].message.tool_calls?.length === 1, `named ${name}: exactly one call`);
}

// streamed: delta.tool_calls fragments accumulate to the same call as the non-streamed answer
{
  const body = { model: MODEL, messages: msgs, tools, temperature: 0, max_tokens: 200,
                 tool_choice: { type: "function", function: { name: "get_weather" } } };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let name = "", args = "", finish = null, content = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.content) content += d.content;
    for (const tc of d.tool_calls ?? []) {
      if (tc.function?.name) name += tc.function.name;
      if (tc.function?.arguments) args += tc.function.arguments;
    }
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  const w = whole.choices[0].message.tool_calls?.[0];
  check(finish === "tool_calls", `stream: finish_reason ${finish}`);
  check(content === "", `stream: no text content (${JSON.stringify(content)})`);
  check(w && name === w.function.name && args === w.function.arguments,
    `stream: same call as the whole answer (${name} ${args} vs ${w?.function.name} ${w?.function.arguments})`);
}

// the tool round trip: the tool result goes back and the next turn (auto) answers in text
{
  const first = await client.chat.completions.create({ model: MODEL, messages: msgs, tools, temperature: 0, max_tokens: 200,
    tool_choice: { type: "function", function: { name: "define_word" } } });
  const call = first.choices[0].message.tool_calls[0];
  const second = await client.chat.completions.create({ model: MODEL, tools, temperature: 0, max_tokens: 40,
    messages: [...msgs, first.choices[0].message,
               { role: "tool", tool_call_id: call.id, content: "a large body of water" }] });
  check(typeof second.choices[0].message.content === "string", "round trip: the next turn answers");
}

// what cannot be honoured: refused by name
async function expect400(body, param, what) {
  try {
    await client.chat.completions.create(body);
    check(false, `${what}: accepted`);
  } catch (e) {
    check(e.status === 400 && e.error?.param === param, `${what}: ${e.status} param ${e.error?.param} (${e.message})`);
  }
}
await expect400({ model: MODEL, messages: msgs, tools, tool_choice: "required",
                  response_format: { type: "json_object" } }, "tool_choice", "required + response_format");
// strict tools under tool_choice auto: free text until the model opens a call, then the call's
// grammar (the demo model rarely opens one: the answer is text, or a call that validates)
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, tool_choice: "auto", max_tokens: 60,
    temperature: 1.0, seed, tools: [{ type: "function", function: { name: "get_weather", strict: true, parameters: weather } }] });
  const m = r.choices[0].message;
  if (m.tool_calls?.length) checkCalls(m.tool_calls, `strict under auto, seed ${seed}`, "get_weather");
  else check(typeof m.content === "string" && r.choices[0].finish_reason !== "tool_calls", `strict under auto, seed ${seed}: text`);
}

// the Responses API (tools strict by default) and the Anthropic Messages API enforce the same way
{
  const r = await client.responses.create({ model: MODEL, input: 'What does "ocean" mean?', temperature: 0,
    max_output_tokens: 200, tool_choice: "required",
    tools: tools.map((t) => ({ type: "function", name: t.function.name, parameters: t.function.parameters })) });
  const calls = r.output.filter((o) => o.type === "function_call");
  check(calls.length >= 1, `responses required: function_call items (${JSON.stringify(r.output)})`);
  checkCalls(calls.map((c) => ({ id: c.call_id.replace(/^call_/, "call_"), type: "function",
    function: { name: c.name, arguments: c.arguments } })), "responses required");
  const anth = await (await fetch(`${base}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 200, messages: msgs, tool_choice: { type: "tool", name: "define_word" },
      tools: [{ name: "define_word", description: "WordNet senses", input_schema: define }] }) })).json();
  const uses = (anth.content ?? []).filter((b) => b.type === "tool_use");
  check(anth.stop_reason === "tool_use" && uses.length === 1 && uses[0].name === "define_word",
    `messages tool_choice tool: one tool_use (${JSON.stringify(anth)})`);
  check(uses[0] && ajv.validate(define, uses[0].input), `messages: input validates (${ajv.errorsText()})`);
}
await expect400({ model: MODEL, messages: msgs, tool_choice: "required",
                  tools: [{ type: "function", function: { name: "f", strict: true,
                    parameters: { type: "object", properties: { n: { type: "number", multipleOf: 3 } } } } }] },
                "tools", "a strict schema the converter refuses");

console.log(`tools_enforced_e2e.mjs: ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
