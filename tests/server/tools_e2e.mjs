// Tool calls and reasoning end to end with the official `openai` npm package, against the fake
// backend serving a real chat template (--chat-template-file) and scripted replies
// (--fake-script tests/fixtures/toolcalls/fake_script_<family>.json): the "model" writes the
// family's own tool-call syntax byte by byte, the server must hand OpenAI's shapes back.
// usage: node tools_e2e.mjs BASE_URL hermes|deepseek
import OpenAI from "openai";

const base = process.argv[2];
const family = process.argv[3];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
let failures = 0, passed = 0;

function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL [${family}]: ${what}`);
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const user = (content) => [{ role: "user", content }];

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather", description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
  },
};
const req = (content, extra = {}) => ({ model: "fake-model", messages: user(content), tools: [weatherTool], temperature: 0, ...extra });

// Raw stream: the deltas as OpenAI sends them, summed up and checked chunk by chunk.
async function rawStream(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const out = { content: "", reasoning: "", calls: [], finish: null, usage: null, firstDeltas: [], contentChunks: 0 };
  for await (const ch of stream) {
    if (ch.usage) out.usage = ch.usage;
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta;
    if (d.content) { out.content += d.content; out.contentChunks++; }
    if (d.reasoning_content) out.reasoning += d.reasoning_content;
    for (const tc of d.tool_calls ?? []) {
      if (!out.calls[tc.index]) {
        // the first delta of a call: id, type, name and empty arguments, as OpenAI sends it
        out.firstDeltas.push(tc);
        check(tc.index === out.calls.length, `call index ${tc.index} follows ${out.calls.length} calls`);
        out.calls[tc.index] = { id: tc.id, name: tc.function?.name, arguments: tc.function?.arguments ?? "" };
      } else {
        check(tc.id === undefined && tc.function?.name === undefined && tc.type === undefined,
          "later deltas of a call carry only its index and argument fragments");
        out.calls[tc.index].arguments += tc.function?.arguments ?? "";
      }
    }
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

async function expectStatus(body, status, param) {
  try {
    await client.chat.completions.create(body);
    check(false, `${JSON.stringify(body).slice(0, 120)}: accepted, want ${status}`);
  } catch (e) {
    check(e.status === status && e.param === param, `${param}: status ${e.status} param ${e.param} (${e.message})`);
  }
}

async function hermes() {
  // ==== one call, whole response ====
  const r = await client.chat.completions.create(req("Weather in Paris?"));
  const m = r.choices[0].message;
  check(r.choices[0].finish_reason === "tool_calls", `finish_reason ${r.choices[0].finish_reason}`);
  check(m.content === null, `content of a call-only reply is null (${JSON.stringify(m.content)})`);
  check(m.tool_calls?.length === 1, "one tool call");
  const tc = m.tool_calls[0];
  check(/^call_[A-Za-z0-9]{24}$/.test(tc.id) && tc.type === "function" && tc.function.name === "get_weather",
    `call shape ${JSON.stringify(tc)}`);
  check(same(JSON.parse(tc.function.arguments), { city: "Paris", unit: "celsius" }), "arguments");
  const r2 = await client.chat.completions.create(req("Weather in Paris?"));
  check(r2.choices[0].message.tool_calls[0].id !== tc.id, "call ids are unique");

  // ==== the same, streamed ====
  const s = await rawStream(req("Weather in Paris?"));
  check(s.finish === "tool_calls" && s.content === "", `stream finish ${s.finish}, content '${s.content}'`);
  check(s.calls.length === 1 && s.calls[0].name === "get_weather" && /^call_/.test(s.calls[0].id), "stream call header");
  check(s.firstDeltas[0]?.type === "function" && s.firstDeltas[0]?.function?.arguments === "",
    `first delta ${JSON.stringify(s.firstDeltas[0])}`);
  check(s.calls[0].arguments === tc.function.arguments, `streamed arguments '${s.calls[0].arguments}'`);
  check(s.usage?.completion_tokens === r.usage.completion_tokens, "stream usage");

  // the client's stream helper sees argument deltas and assembles the same message
  let argDeltas = 0, argsDone = null;
  const helper = client.chat.completions.stream(req("Weather in Paris?"));
  helper.on("tool_calls.function.arguments.delta", () => argDeltas++);
  helper.on("tool_calls.function.arguments.done", (e) => { argsDone = e.arguments; });
  const fin = await helper.finalChatCompletion();
  check(argDeltas > 1, `argument fragments (${argDeltas})`);
  check(argsDone === tc.function.arguments, `arguments.done '${argsDone}'`);
  check(same(JSON.parse(fin.choices[0].message.tool_calls[0].function.arguments), { city: "Paris", unit: "celsius" }),
    "stream helper's final message");

  // ==== runTools: the client runs the tool and sends its result back (role: tool through the template) ====
  for (const stream of [false, true]) {
    const seen = [];
    const runner = client.chat.completions.runTools({
      model: "fake-model", messages: user("Weather in Paris?"), temperature: 0, stream,
      tools: [{ type: "function", function: { name: "get_weather", parameters: weatherTool.function.parameters,
        parse: JSON.parse, function: (args) => { seen.push(args); return "TOOL RESULT: sunny, 22C"; } } }],
    });
    const text = await runner.finalContent();
    check(text === "It is sunny and 22 C in Paris.", `runTools (stream ${stream}) final content '${text}'`);
    check(seen.length === 1 && same(seen[0], { city: "Paris", unit: "celsius" }), "runTools called the tool once");
  }

  // ==== parallel calls ====
  const p = await client.chat.completions.create(req("Paris and Tokyo?"));
  const pc = p.choices[0].message.tool_calls;
  check(pc?.length === 2 && pc[0].id !== pc[1].id, "two calls, two ids");
  check(same(pc.map((c) => JSON.parse(c.function.arguments).city), ["Paris", "Tokyo"]), "both arguments");
  const ps = await rawStream(req("Paris and Tokyo?"));
  check(ps.calls.length === 2 && same(ps.calls.map((c) => c.arguments), pc.map((c) => c.function.arguments)),
    "streamed parallel calls");
  const one = await client.chat.completions.create(req("Paris and Tokyo?", { parallel_tool_calls: false }));
  check(one.choices[0].message.tool_calls?.length === 1, "parallel_tool_calls false: one call");

  // ==== text before the call ====
  const cf = await client.chat.completions.create(req("Check first."));
  check(cf.choices[0].message.content === "Let me check." && cf.choices[0].message.tool_calls?.length === 1,
    `content before a call: ${JSON.stringify(cf.choices[0].message)}`);
  const cfs = await rawStream(req("Check first."));
  check(cfs.content === "Let me check." && cfs.calls.length === 1, `streamed content before a call '${cfs.content}'`);

  // ==== non-ASCII arguments, one byte per token ====
  const u = await rawStream(req("Unicode please"));
  check(JSON.parse(u.calls[0]?.arguments ?? "{}").city === "Zürich 東京", `non-ASCII arguments '${u.calls[0]?.arguments}'`);

  // ==== n = 2: each choice parses its own reply ====
  const n2 = await client.chat.completions.create(req("Weather in Paris?", { n: 2 }));
  check(n2.choices.length === 2 && n2.choices.every((c) => c.finish_reason === "tool_calls" && c.message.tool_calls.length === 1),
    "n = 2 with tools");

  // ==== tool_choice none: tools are not offered, calls are not parsed ====
  const none = await client.chat.completions.create(req("Weather in Paris?", { tool_choice: "none" }));
  check(!none.choices[0].message.tool_calls && none.choices[0].message.content.includes("<tool_call>") &&
    none.choices[0].finish_reason === "stop", "tool_choice none: the text as it is");
  for (const [choice, want] of [["none", false], ["auto", true]]) {
    const t = await (await fetch(`${base}/apply-template`, { method: "POST",
      body: JSON.stringify({ messages: user("hi"), tools: [weatherTool], tool_choice: choice }) })).json();
    check(t.prompt.includes("# Tools") === want, `apply-template with tool_choice ${choice}`);
  }

  // ==== reasoning ====
  const th = await client.chat.completions.create({ model: "fake-model", messages: user("Think about it.") });
  check(th.choices[0].message.reasoning_content === "Let me think: 2 + 2 = 4." &&
    th.choices[0].message.content === "The answer is 4.", `reasoning split ${JSON.stringify(th.choices[0].message)}`);
  const ths = await rawStream({ model: "fake-model", messages: user("Think about it.") });
  check(ths.reasoning === "Let me think: 2 + 2 = 4." && ths.content === "The answer is 4." && ths.finish === "stop",
    `streamed reasoning '${ths.reasoning}' / '${ths.content}'`);
  const raw = "<think>\nLet me think: 2 + 2 = 4.\n</think>\n\nThe answer is 4.";
  const rn = await client.chat.completions.create({ model: "fake-model", messages: user("Think about it."), reasoning_format: "none" });
  check(rn.choices[0].message.content === raw && rn.choices[0].message.reasoning_content === undefined,
    "reasoning_format none: the thoughts stay in content");
  const rl = await client.chat.completions.create({ model: "fake-model", messages: user("Think about it."), reasoning_format: "deepseek-legacy" });
  check(rl.choices[0].message.content === raw && rl.choices[0].message.reasoning_content === "Let me think: 2 + 2 = 4.",
    "reasoning_format deepseek-legacy: both");
  // /completion answers raw text, as llama-server does
  const comp = await (await fetch(`${base}/completion`, { method: "POST",
    body: JSON.stringify({ prompt: "Think about it.", n_predict: 200 }) })).json();
  check(comp.content === raw, `/completion keeps the raw text '${comp.content}'`);

  // ==== enforced tool_choice and fields that cannot take effect: 400 naming them ====
  await expectStatus(req("Weather in Paris?", { tool_choice: "required" }), 400, "tool_choice");
  await expectStatus(req("Weather in Paris?", { tool_choice: { type: "function", function: { name: "get_weather" } } }), 400, "tool_choice");
  await expectStatus(req("x", { tool_choice: { type: "function", function: { name: "nope" } } }), 400, "tool_choice");
  await expectStatus({ model: "fake-model", messages: user("x"), reasoning_effort: "high" }, 400, "reasoning_effort");
  const walk = [
    ["audio", { voice: "alloy", format: "wav" }], ["modalities", ["text", "audio"]], ["store", true],
    ["metadata", { k: "v" }], ["service_tier", "priority"], ["prediction", { type: "content", content: "x" }],
    ["web_search_options", {}], ["verbosity", "high"], ["functions", [{ name: "f" }]], ["function_call", "auto"],
    ["prompt_cache_retention", "24h"], ["reasoning_format", "xml"], ["parallel_tool_calls", "yes"],
  ];
  for (const [field, value] of walk)
    await expectStatus({ model: "fake-model", messages: user("x"), [field]: value }, 400, field);
  const fine = await client.chat.completions.create({ model: "fake-model", messages: user("x"), max_tokens: 2,
    store: false, metadata: {}, service_tier: "auto", modalities: ["text"], prompt_cache_key: "k", safety_identifier: "s",
    user: "u", reasoning_effort: "none" });
  check(fine.choices.length === 1, "accepted fields");
}

async function deepseek() {
  const want = [{ city: "Paris" }, { city: "東京" }];
  const r = await client.chat.completions.create(req("Weather in Paris?"));
  const calls = r.choices[0].message.tool_calls ?? [];
  check(r.choices[0].finish_reason === "tool_calls" && calls.length === 2, `two DeepSeek calls ${JSON.stringify(r.choices[0])}`);
  check(same(calls.map((c) => JSON.parse(c.function.arguments)), want), "DeepSeek arguments");
  check(r.choices[0].message.content === null, "no content around the tool tokens");
  // the markers are multi-byte characters that arrive one byte per token
  const s = await rawStream(req("Weather in Paris?"));
  check(s.content === "" && same(s.calls.map((c) => JSON.parse(c.arguments)), want), `streamed DeepSeek calls ${JSON.stringify(s)}`);
  const th = await client.chat.completions.create({ model: "fake-model", messages: user("Think about it.") });
  check(th.choices[0].message.reasoning_content === "Let me think: 2 + 2 = 4.", "R1-style reasoning");
}

if (family === "hermes") await hermes();
else await deepseek();
console.log(`tools e2e [${family}]: ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
