// The OpenAI Responses API (/v1/responses) and the Anthropic Messages API (/v1/messages,
// /v1/messages/count_tokens) end to end with the official clients from npm (`openai`,
// `@anthropic-ai/sdk`).
//   fake: the fake backend serving Qwen 3's chat template and scripted replies
//         (tests/fixtures/toolcalls/fake_script_apis.json): reasoning, tool calls and their
//         round trips, previous_response_id and the store, streams checked event by event
//         against the documented order, stop reasons, prefill, thinking, count_tokens, and a
//         walk over each API's request fields (each takes effect or is a 400 naming it).
//   demo: the demo model on the real engine: greedy answers of both routes equal the chat
//         route's for the same conversation, streamed and not.
// usage: node apis_e2e.mjs BASE_URL fake|demo
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const base = process.argv[2];
const mode = process.argv[3];
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
let failures = 0, passed = 0;

function check(cond, what) {
  if (cond) { passed++; return; }
  failures++;
  console.error(`FAIL [${mode}]: ${what}`);
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const MODEL = "fake-model";

// ==== Raw SSE: every event's `event:` name and its JSON, as sent ====
async function sse(path, body, headers = {}) {
  const r = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: true }) });
  const text = await r.text();
  const events = [];
  for (const block of text.split("\n\n")) {
    const lines = block.split("\n").filter((l) => l && !l.startsWith(":"));
    if (!lines.length) continue;
    const ev = lines.find((l) => l.startsWith("event: "))?.slice(7);
    const data = lines.find((l) => l.startsWith("data: "))?.slice(6);
    events.push({ event: ev, data: data === undefined ? undefined : JSON.parse(data) });
  }
  return { status: r.status, events, text };
}

// ==== The Responses stream's documented order ====
// created, in_progress, then per output item (output_index 0, 1, ...):
//   message / reasoning: output_item.added, content_part.added, *.delta..., *.done,
//                        content_part.done, output_item.done
//   function_call: output_item.added, function_call_arguments.delta..., .done, output_item.done
// and completed | incomplete | failed last; sequence_number 0, 1, 2, ...; `event:` = data.type.
function responsesOrder(events, what) {
  const ok = (c, m) => check(c, `${what}: ${m}`);
  const ev = events.map((e) => e.data);
  ok(events.every((e) => e.event === e.data?.type), "every event: line names its data's type");
  ok(ev.every((e, i) => e.sequence_number === i), "sequence_number counts from 0 without gaps");
  ok(ev[0]?.type === "response.created" && ev[0].response.status === "in_progress" && ev[0].response.output.length === 0,
    "response.created first, in_progress, no output");
  ok(ev[1]?.type === "response.in_progress", "response.in_progress second");
  let i = 2;
  const items = [];
  const take = (type) => (ev[i]?.type === type ? ev[i++] : null);
  while (ev[i]?.type === "response.output_item.added") {
    const added = ev[i++], k = items.length, item = added.item;
    ok(added.output_index === k && item.status === "in_progress", `item ${k} added in order, in_progress`);
    let done;
    if (item.type === "function_call") {
      ok(item.arguments === "" && /^call_/.test(item.call_id) && /^fc_/.test(item.id), `item ${k}: call header`);
      let args = "", d;
      while ((d = take("response.function_call_arguments.delta"))) {
        ok(d.item_id === item.id && d.output_index === k, `item ${k}: argument delta ids`);
        args += d.delta;
      }
      const ad = take("response.function_call_arguments.done");
      ok(ad && ad.arguments === args && ad.item_id === item.id, `item ${k}: arguments.done = the deltas`);
      done = take("response.output_item.done");
      ok(done && done.item.arguments === args && done.item.call_id === item.call_id, `item ${k}: done item`);
    } else {
      const kind = item.type === "message" ? "output_text" : "reasoning_text";
      ok(item.type === "message" ? /^msg_/.test(item.id) && item.role === "assistant" : /^rs_/.test(item.id),
        `item ${k}: ${item.type} id`);
      const pa = take("response.content_part.added");
      ok(pa && pa.item_id === item.id && pa.content_index === 0 && pa.part.type === kind && pa.part.text === "",
        `item ${k}: content_part.added (${kind})`);
      let text = "", d;
      while ((d = take(`response.${kind}.delta`))) {
        ok(d.item_id === item.id && d.output_index === k && d.content_index === 0, `item ${k}: delta ids`);
        text += d.delta;
      }
      const td = take(`response.${kind}.done`);
      ok(td && td.text === text, `item ${k}: ${kind}.done = the deltas`);
      const pd = take("response.content_part.done");
      ok(pd && pd.part.text === text && pd.part.type === kind, `item ${k}: content_part.done`);
      done = take("response.output_item.done");
      ok(done && done.item.content?.[0]?.text === text, `item ${k}: output_item.done holds the text`);
    }
    ok(done && done.output_index === k && done.item.id === item.id, `item ${k}: output_item.done ids`);
    if (done) items.push(done.item);
  }
  const last = ev[i];
  ok(["response.completed", "response.incomplete", "response.failed"].includes(last?.type) && i === ev.length - 1,
    `a terminal event last (got ${last?.type} at ${i} of ${ev.length})`);
  if (last?.type !== "response.failed") ok(same(last?.response?.output, items), "the final output = the items streamed");
  return { final: last?.response, items, terminal: last?.type };
}

// ==== The Messages stream's documented order ====
// message_start, ping, per block (index 0, 1, ...): content_block_start, content_block_delta...
// (a thinking block's signature_delta last), content_block_stop; message_delta, message_stop.
function messagesOrder(events, what) {
  const ok = (c, m) => check(c, `${what}: ${m}`);
  const ev = events.map((e) => e.data);
  ok(events.every((e) => e.event === e.data?.type), "every event: line names its data's type");
  ok(ev[0]?.type === "message_start" && ev[0].message.content.length === 0 && /^msg_/.test(ev[0].message.id),
    "message_start first");
  ok(ev[1]?.type === "ping", "ping second");
  let i = 2;
  const blocks = [];
  const want = { text: "text_delta", thinking: "thinking_delta", tool_use: "input_json_delta" };
  while (ev[i]?.type === "content_block_start") {
    const st = ev[i++], k = blocks.length, b = { ...st.content_block };
    ok(st.index === k, `block ${k} starts in order`);
    let acc = "";
    while (ev[i]?.type === "content_block_delta" && ev[i].delta.type === want[b.type]) {
      ok(ev[i].index === k, `block ${k}: delta index`);
      acc += ev[i].delta.text ?? ev[i].delta.thinking ?? ev[i].delta.partial_json;
      i++;
    }
    if (b.type === "thinking") {
      const sd = ev[i]?.type === "content_block_delta" && ev[i].delta.type === "signature_delta" ? ev[i++] : null;
      ok(sd && /^mlxcel1\.[0-9a-f]{16}$/.test(sd.delta.signature), `block ${k}: signature_delta before the stop`);
      b.thinking = acc;
      b.signature = sd?.delta.signature;
    } else if (b.type === "text") b.text = acc;
    else b.input = acc ? JSON.parse(acc) : {};
    ok(ev[i]?.type === "content_block_stop" && ev[i].index === k, `block ${k}: content_block_stop`);
    i++;
    blocks.push(b);
  }
  const md = ev[i++], ms = ev[i++];
  ok(md?.type === "message_delta" && typeof md.delta.stop_reason === "string" && md.usage.output_tokens > 0,
    `message_delta (${JSON.stringify(md)})`);
  ok(ms?.type === "message_stop" && i === ev.length, "message_stop last");
  return { blocks, stop_reason: md?.delta.stop_reason, stop_sequence: md?.delta.stop_sequence, usage: md?.usage };
}

async function expect400(fn, param, what, status = 400) {
  try {
    await fn();
    check(false, `${what}: accepted, want ${status} naming ${param}`);
  } catch (e) {
    const p = e.param ?? e.error?.param;
    check(e.status === status && (param === null || p === param), `${what}: status ${e.status} param ${p} (${e.message})`);
  }
}

async function rawPost(path, body, headers = {}) {
  const r = await fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: r.status, body: await r.json().catch(() => null) };
}

// ==== Responses on the fake backend ====
const weather = { type: "function", name: "get_weather", description: "Current weather of a city", strict: false,
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] } };

async function responsesFake() {
  // reasoning + message, whole
  const r = await openai.responses.create({ model: MODEL, input: "Think about it." });
  check(/^resp_[0-9a-f]{48}$/.test(r.id) && r.object === "response" && r.status === "completed", `response ${r.id} ${r.status}`);
  check(r.output.length === 2 && r.output[0].type === "reasoning" && r.output[1].type === "message", "reasoning then message");
  check(r.output[0].content?.[0]?.text === "Let me think: 2 + 2 = 4." && same(r.output[0].summary, []), "reasoning_text");
  check(r.output_text === "The answer is 4.", `output_text '${r.output_text}'`);
  const u = r.usage;
  check(u.input_tokens > 0 && u.output_tokens > 0 && u.total_tokens === u.input_tokens + u.output_tokens &&
    u.output_tokens_details.reasoning_tokens > 0 && u.output_tokens_details.reasoning_tokens < u.output_tokens &&
    u.input_tokens_details.cached_tokens >= 0, `usage ${JSON.stringify(u)}`);

  // the same, raw stream, then through the client's stream helper
  const raw = await sse("/v1/responses", { model: MODEL, input: "Think about it." });
  const o = responsesOrder(raw.events, "reasoning stream");
  check(o.terminal === "response.completed" && o.final.status === "completed", "stream ends completed");
  check(same(o.items.map((x) => [x.type, x.content?.[0]?.text]), r.output.map((x) => [x.type, x.content?.[0]?.text])),
    "stream output = whole output");
  check(same(o.final.usage, r.usage), "stream usage = whole usage");
  const seen = [];
  let snap = "";
  const st = openai.responses.stream({ model: MODEL, input: "Think about it." });
  st.on("response.output_text.delta", (e) => { snap = e.snapshot; });
  for await (const e of st) seen.push(e.type);
  const fin = await st.finalResponse(); // (the helper adds output_text only when it parses a format)
  const finText = fin.output.find((x) => x.type === "message")?.content[0]?.text;
  check(finText === "The answer is 4." && snap === "The answer is 4.", `stream helper final '${finText}' snapshot '${snap}'`);
  check(seen[0] === "response.created" && seen.at(-1) === "response.completed" && seen.includes("response.reasoning_text.delta"),
    "stream helper events");

  // tool call, whole and streamed
  const t = await openai.responses.create({ model: MODEL, input: "Weather in Paris?", tools: [weather] });
  const fc = t.output.find((x) => x.type === "function_call");
  check(t.output.length === 1 && fc?.name === "get_weather" && /^call_[A-Za-z0-9]{24}$/.test(fc.call_id) &&
    /^fc_/.test(fc.id) && fc.status === "completed", `function_call item ${JSON.stringify(fc)}`);
  check(same(JSON.parse(fc.arguments), { city: "Paris", unit: "celsius" }), "function_call arguments");
  const ts = await sse("/v1/responses", { model: MODEL, input: "Weather in Paris?", tools: [weather] });
  const to = responsesOrder(ts.events, "tool stream");
  check(to.items.length === 1 && to.items[0].arguments === fc.arguments, "streamed call = whole call");
  check(ts.events.filter((e) => e.event === "response.function_call_arguments.delta").length > 1, "argument fragments");

  // round trip through previous_response_id: only the function_call_output is sent
  const t2 = await openai.responses.create({ model: MODEL, previous_response_id: t.id, tools: [weather],
    input: [{ type: "function_call_output", call_id: fc.call_id, output: "TOOL RESULT: sunny, 22C" }] });
  check(t2.output_text === "It is sunny and 22 C in Paris." && t2.previous_response_id === t.id,
    `round trip via previous_response_id: '${t2.output_text}'`);
  // and statelessly: the earlier output items sent back as input
  const t3 = await openai.responses.create({ model: MODEL, tools: [weather], store: false, input: [
    { role: "user", content: "Weather in Paris?" }, ...t.output,
    { type: "function_call_output", call_id: fc.call_id, output: "TOOL RESULT: sunny, 22C" }] });
  check(t3.output_text === "It is sunny and 22 C in Paris.", `stateless round trip: '${t3.output_text}'`);
  check(t2.usage.input_tokens === t3.usage.input_tokens, `the same conversation either way (${t2.usage.input_tokens} / ${t3.usage.input_tokens} tokens)`);
  await expect400(() => openai.responses.create({ model: MODEL, previous_response_id: t3.id, input: "x" }),
    "previous_response_id", "store false: not kept");
  try {
    await openai.responses.create({ model: MODEL, previous_response_id: "resp_nope", input: "x" });
    check(false, "unknown previous_response_id accepted");
  } catch (e) {
    check(e.status === 400 && e.code === "previous_response_not_found" && e.param === "previous_response_id",
      `unknown previous_response_id: ${e.status} ${e.code} ${e.param}`);
  }

  // several calls, parallel_tool_calls false, text before a call
  const p = await openai.responses.create({ model: MODEL, input: "Paris and Tokyo?", tools: [weather] });
  check(same(p.output.map((x) => JSON.parse(x.arguments).city), ["Paris", "Tokyo"]), "two function_call items");
  const p1 = await openai.responses.create({ model: MODEL, input: "Paris and Tokyo?", tools: [weather], parallel_tool_calls: false });
  check(p1.output.length === 1 && p1.parallel_tool_calls === false, "parallel_tool_calls false: one call");
  const cf = await openai.responses.create({ model: MODEL, input: "Check first.", tools: [weather] });
  check(same(cf.output.map((x) => x.type), ["message", "function_call"]) && cf.output_text === "Let me check.",
    "text before a call: a message item, then the call");
  const none = await openai.responses.create({ model: MODEL, input: "Weather in Paris?", tools: [weather], tool_choice: "none" });
  check(none.output.length === 1 && none.output[0].type === "message" && none.output_text.includes("<tool_call>"),
    "tool_choice none: no call parsed");

  // instructions: in the prompt of their response, not inherited through previous_response_id
  const i1 = await openai.responses.create({ model: MODEL, instructions: "SYS-MARK-1", input: "hi" });
  check(i1.output_text === "The instructions are in the prompt." && i1.instructions === "SYS-MARK-1", "instructions rendered");
  const i2 = await openai.responses.create({ model: MODEL, previous_response_id: i1.id, input: "again", max_output_tokens: 8 });
  check(i2.output_text !== "The instructions are in the prompt." && i2.instructions === null, "instructions not carried over");

  // the store: retrieve, delete
  const got = await openai.responses.retrieve(r.id);
  check(same(got.output, r.output) && got.id === r.id, "GET /v1/responses/{id}");
  const del = await openai.responses.delete(i1.id).catch((e) => e);
  check(!(del instanceof Error), `DELETE /v1/responses/{id}: ${del?.message ?? "ok"}`);
  await expect400(() => openai.responses.retrieve(i1.id), null, "deleted response", 404);

  // max_output_tokens cuts: incomplete
  const inc = await openai.responses.create({ model: MODEL, input: "Think about it.", max_output_tokens: 5 });
  check(inc.status === "incomplete" && inc.incomplete_details?.reason === "max_output_tokens" && inc.usage.output_tokens === 5,
    `incomplete: ${inc.status} ${JSON.stringify(inc.incomplete_details)}`);
  const incs = await sse("/v1/responses", { model: MODEL, input: "Think about it.", max_output_tokens: 5 });
  const io = responsesOrder(incs.events, "incomplete stream");
  check(io.terminal === "response.incomplete" && io.items.at(-1)?.status === "incomplete", "stream ends response.incomplete");

  // reasoning.effort through the template's switch: none adds Qwen 3's empty thoughts to the prompt
  const e0 = await openai.responses.create({ model: MODEL, input: "hi", max_output_tokens: 2 });
  const en = await openai.responses.create({ model: MODEL, input: "hi", max_output_tokens: 2, reasoning: { effort: "none" } });
  check(en.usage.input_tokens > e0.usage.input_tokens, `reasoning.effort none changes the prompt (${e0.usage.input_tokens} -> ${en.usage.input_tokens})`);
  await expect400(() => openai.responses.create({ model: MODEL, input: "hi", reasoning: { effort: "high" } }),
    "reasoning.effort", "effort the template cannot take");

  // structured output: text.format goes where the chat route's response_format goes
  const schema = { type: "object", properties: { city: { type: "string" }, temperature: { type: "integer" } },
    required: ["city", "temperature"], additionalProperties: false };
  try {
    const j = await openai.responses.create({ model: MODEL, input: "Give me JSON.",
      text: { format: { type: "json_schema", name: "weather", schema, strict: true } } });
    const v = JSON.parse(j.output_text);
    check(typeof v.city === "string" && Number.isInteger(v.temperature) && Object.keys(v).length === 2,
      `json_schema output validates: ${j.output_text}`);
  } catch (e) {
    check(e.status === 400 && e.param === "text.format", `json_schema refused as the chat route refuses it: ${e.status} ${e.param} ${e.message}`);
  }

  // accepted fields take effect or are echoed
  const acc = await openai.responses.create({ model: MODEL, input: "hi", max_output_tokens: 3, temperature: 0.5, top_p: 0.9,
    metadata: { k: "v" }, user: "u1", store: true, truncation: "disabled", include: [], service_tier: "auto",
    prompt_cache_key: "pk", safety_identifier: "si", max_tool_calls: 2, parallel_tool_calls: true, background: false,
    text: { format: { type: "text" } } });
  check(acc.temperature === 0.5 && acc.top_p === 0.9 && same(acc.metadata, { k: "v" }) && acc.user === "u1" &&
    acc.max_output_tokens === 3 && acc.max_tool_calls === 2, `echoed fields ${JSON.stringify(acc).slice(0, 300)}`);

  // every field or value that cannot take effect: a 400 naming it
  const walk = [
    ["background", { background: true }], ["conversation", { conversation: "conv_1" }],
    ["prompt", { prompt: { id: "pmpt_1" } }], ["truncation", { truncation: "auto" }],
    ["top_logprobs", { top_logprobs: 2 }], ["include", { include: ["reasoning.encrypted_content"] }],
    ["stream_options.include_obfuscation", { stream: true, stream_options: { include_obfuscation: true } }],
    ["text.verbosity", { text: { verbosity: "low" } }], ["reasoning.summary", { reasoning: { summary: "auto" } }],
    ["tools[0].type", { tools: [{ type: "web_search" }] }], ["tool_choice", { tools: [weather], tool_choice: { type: "file_search" } }],
    ["tool_choice", { tools: [weather], tool_choice: "required" }],
    ["tool_choice", { tools: [weather], tool_choice: { type: "function", name: "get_weather" } }],
    ["tools", { tools: [{ ...weather, strict: undefined }] }], // strict by default: a grammar, which the fake cannot run (the demo model does: tests/grammar/tools_enforced_e2e.mjs)
    ["service_tier", { service_tier: "priority" }], ["prompt_cache_retention", { prompt_cache_retention: "24h" }],
    ["metadata", { metadata: Object.fromEntries([...Array(17).keys()].map((k) => [`k${k}`, "v"])) }],
    ["input[0].content[1].type", { input: [{ role: "user", content: [{ type: "input_text", text: "x" }, { type: "input_image", image_url: "http://x/y.png" }] }] }],
    ["input[0].type", { input: [{ type: "web_search_call", id: "ws_1", status: "completed" }] }],
    ["input[0]", { input: [{ type: "item_reference", id: "msg_1" }] }],
    ["input[0].encrypted_content", { input: [{ type: "reasoning", id: "rs_1", summary: [], encrypted_content: "abc" }] }],
    ["input[0].role", { input: [{ role: "tool", content: "x" }] }],
    ["max_output_tokens", { max_output_tokens: 0 }], ["temperature", { temperature: 3 }],
    ["foo", { foo: 1 }], ["input", { input: 42 }],
  ];
  for (const [param, extra] of walk) {
    const body = { model: MODEL, input: "x", ...extra };
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const res = await rawPost("/v1/responses", body);
    check(res.status === 400 && res.body?.error?.param === param && typeof res.body.error.message === "string",
      `responses field walk ${param}: ${res.status} ${JSON.stringify(res.body)}`);
  }
}

// ==== Messages on the fake backend ====
const aTool = { name: "get_weather", description: "Current weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] } };
const user = (content) => [{ role: "user", content }];

async function messagesFake() {
  // thinking + text
  const th = { type: "enabled", budget_tokens: 1024 };
  const m = await anthropic.messages.create({ model: MODEL, max_tokens: 2000, messages: user("Think about it."), thinking: th });
  check(/^msg_01[A-Za-z0-9]{22}$/.test(m.id) && m.type === "message" && m.role === "assistant" && m.stop_reason === "end_turn" &&
    m.stop_sequence === null, `message ${m.id} ${m.stop_reason}`);
  check(m.content.length === 2 && m.content[0].type === "thinking" && m.content[0].thinking === "Let me think: 2 + 2 = 4." &&
    /^mlxcel1\./.test(m.content[0].signature) && m.content[1].type === "text" && m.content[1].text === "The answer is 4.",
    `content ${JSON.stringify(m.content)}`);
  check(m.usage.input_tokens > 0 && m.usage.output_tokens > 0 && m.usage.cache_read_input_tokens >= 0, "usage");

  // the same streamed: raw events in the documented order, and the client's stream helper
  const raw = await sse("/v1/messages", { model: MODEL, max_tokens: 2000, messages: user("Think about it."), thinking: th });
  const o = messagesOrder(raw.events, "thinking stream");
  check(same(o.blocks, m.content) && o.stop_reason === "end_turn", `streamed blocks = whole blocks ${JSON.stringify(o.blocks)}`);
  check(o.usage.output_tokens === m.usage.output_tokens &&
    o.usage.input_tokens + o.usage.cache_read_input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens,
    "streamed usage");
  let thinking = "", text = "";
  const st = anthropic.messages.stream({ model: MODEL, max_tokens: 2000, messages: user("Think about it."), thinking: th });
  st.on("thinking", (d) => { thinking += d; }).on("text", (d) => { text += d; });
  const fin = await st.finalMessage();
  check(same(fin.content, m.content) && thinking === m.content[0].thinking && text === "The answer is 4.",
    `stream helper finalMessage ${JSON.stringify(fin.content)}`);

  // thinking blocks go back unmodified; a changed one is refused
  const turn2 = [...user("Think about it."), { role: "assistant", content: m.content }, ...user("And again?")];
  const m2 = await anthropic.messages.create({ model: MODEL, max_tokens: 2000, messages: turn2, thinking: th });
  check(m2.stop_reason === "end_turn", "thinking block sent back");
  const tampered = structuredClone(turn2);
  tampered[1].content[0].thinking += " (edited)";
  await expect400(() => anthropic.messages.create({ model: MODEL, max_tokens: 2000, messages: tampered, thinking: th }),
    null, "changed thinking block");
  const bad = await rawPost("/v1/messages", { model: MODEL, max_tokens: 2000, messages: tampered });
  check(bad.status === 400 && bad.body?.type === "error" && bad.body.error?.type === "invalid_request_error" &&
    bad.body.error.message.startsWith("messages[1].content[0].signature"), `changed thinking: ${JSON.stringify(bad.body)}`);

  // thinking through the template's switch: disabled adds Qwen 3's empty thoughts to the prompt
  const cOn = await anthropic.messages.countTokens({ model: MODEL, messages: user("hi"), thinking: th });
  const cOff = await anthropic.messages.countTokens({ model: MODEL, messages: user("hi"), thinking: { type: "disabled" } });
  check(cOff.input_tokens > cOn.input_tokens, `thinking disabled changes the prompt (${cOn.input_tokens} -> ${cOff.input_tokens})`);

  // tool use round trip
  const t = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: user("Weather in Paris?"), tools: [aTool] });
  const tu = t.content.find((b) => b.type === "tool_use");
  check(t.stop_reason === "tool_use" && t.content.length === 1 && /^toolu_[A-Za-z0-9]{24}$/.test(tu?.id) &&
    tu.name === "get_weather" && same(tu.input, { city: "Paris", unit: "celsius" }), `tool_use ${JSON.stringify(t.content)}`);
  const back = [...user("Weather in Paris?"), { role: "assistant", content: t.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "TOOL RESULT: sunny, 22C" }] }];
  const t2 = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: back, tools: [aTool] });
  check(t2.stop_reason === "end_turn" && t2.content[0]?.text === "It is sunny and 22 C in Paris.",
    `tool_result round trip: ${JSON.stringify(t2.content)}`);
  const tsx = anthropic.messages.stream({ model: MODEL, max_tokens: 500, messages: user("Weather in Paris?"), tools: [aTool] });
  let jsonDeltas = 0;
  tsx.on("inputJson", () => jsonDeltas++);
  const tf = await tsx.finalMessage();
  check(jsonDeltas > 1 && same(tf.content[0]?.input, tu.input) && tf.stop_reason === "tool_use", "streamed tool_use");
  const traw = await sse("/v1/messages", { model: MODEL, max_tokens: 500, messages: user("Paris and Tokyo?"), tools: [aTool] });
  const tob = messagesOrder(traw.events, "tool stream");
  check(same(tob.blocks.map((b) => b.input.city), ["Paris", "Tokyo"]) && tob.stop_reason === "tool_use", "two streamed tool_use blocks");
  const one = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: user("Paris and Tokyo?"), tools: [aTool],
    tool_choice: { type: "auto", disable_parallel_tool_use: true } });
  check(one.content.length === 1, "disable_parallel_tool_use: one call");
  const tn = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: user("Weather in Paris?"), tools: [aTool],
    tool_choice: { type: "none" } });
  check(tn.stop_reason === "end_turn" && tn.content[0]?.type === "text", "tool_choice none: no tool_use");
  const cf = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: user("Check first."), tools: [aTool] });
  check(same(cf.content.map((b) => b.type), ["text", "tool_use"]) && cf.content[0].text === "Let me check.", "text then tool_use");
  const er = await anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: [...user("Weather in Paris?"),
    { role: "assistant", content: t.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, is_error: true, content: [{ type: "text", text: "timeout" }] }] }],
    tools: [aTool] });
  check(er.stop_reason !== undefined, "is_error tool_result accepted");
  await expect400(() => anthropic.messages.create({ model: MODEL, max_tokens: 50, messages: user("x"), tools: [aTool],
    tool_choice: { type: "any" } }), null, "tool_choice any needs constrained decoding");

  // count_tokens = the prompt of the same request
  const req = { model: MODEL, system: "Be brief.", messages: back, tools: [aTool] };
  const ct = await anthropic.messages.countTokens(req);
  const run = await anthropic.messages.create({ ...req, max_tokens: 500 });
  check(ct.input_tokens === run.usage.input_tokens + run.usage.cache_read_input_tokens,
    `count_tokens ${ct.input_tokens} = the request's prompt ${run.usage.input_tokens} + ${run.usage.cache_read_input_tokens}`);

  // stop sequences, max_tokens, prefill
  const ss = await anthropic.messages.create({ model: MODEL, max_tokens: 100, messages: user("Stop here."), stop_sequences: ["STOP"] });
  check(ss.stop_reason === "stop_sequence" && ss.stop_sequence === "STOP" && ss.content[0]?.text === "one two ",
    `stop_sequence: ${JSON.stringify(ss)}`);
  const sraw = await sse("/v1/messages", { model: MODEL, max_tokens: 100, messages: user("Stop here."), stop_sequences: ["STOP"] });
  const so = messagesOrder(sraw.events, "stop stream");
  check(so.stop_reason === "stop_sequence" && so.stop_sequence === "STOP", "streamed stop_sequence");
  const mt = await anthropic.messages.create({ model: MODEL, max_tokens: 3, messages: user("Stop here.") });
  check(mt.stop_reason === "max_tokens" && mt.usage.output_tokens === 3, `max_tokens: ${mt.stop_reason}`);
  const pf = await anthropic.messages.create({ model: MODEL, max_tokens: 50,
    messages: [...user("Say it."), { role: "assistant", content: "PREFILL-MARK" }] });
  check(pf.content[0]?.text === " continued.", `prefill continued: ${JSON.stringify(pf.content)}`);

  // errors in Anthropic's shape
  const e1 = await rawPost("/v1/messages", { model: MODEL, messages: user("x") });
  check(e1.status === 400 && same(Object.keys(e1.body ?? {}), ["type", "error"]) && e1.body.error.type === "invalid_request_error" &&
    e1.body.error.message.startsWith("max_tokens"), `missing max_tokens: ${JSON.stringify(e1.body)}`);
  const e2 = await rawPost("/v1/messages", "{", {});
  check(e2.status === 400 && e2.body?.type === "error", "bad JSON in Anthropic's shape");
  const e3 = await rawPost("/v1/messages", { model: MODEL, max_tokens: 5, messages: user("x") }, { "anthropic-version": "2020-01-01" });
  check(e3.status === 400 && e3.body?.error?.message.startsWith("anthropic-version"), "anthropic-version other than 2023-06-01");
  const e4 = await fetch(`${base}/v1/messages/nope`, { method: "POST", body: "{}" });
  check(e4.status === 404 && (await e4.json()).error?.type === "not_found_error", "404 in Anthropic's shape");

  // the field walk: each unsupported field or value is a 400 naming it
  const walk = [
    ["messages[0].content[0].type", { messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }],
    ["messages[0].content[1].type", { messages: [{ role: "user", content: [{ type: "text", text: "x" }, { type: "document", source: { type: "text", media_type: "text/plain", data: "d" } }] }] }],
    ["messages[1].content[0].type", { messages: [...user("x"), { role: "assistant", content: [{ type: "redacted_thinking", data: "x" }] }, ...user("y")] }],
    ["messages[0].role", { messages: [{ role: "system", content: "x" }] }],
    ["messages[0].content[0].citations", { messages: [{ role: "user", content: [{ type: "text", text: "x", citations: [{ type: "char_location" }] }] }] }],
    ["tools[0].type", { tools: [{ type: "web_search_20250305", name: "web_search" }] }],
    ["tools[0].input_schema", { tools: [{ name: "f" }] }],
    ["container", { container: "c" }], ["mcp_servers", { mcp_servers: [{ type: "url", url: "http://x", name: "m" }] }],
    ["context_management", { context_management: { edits: [] } }], ["output_format", { output_format: { type: "json_schema", schema: {} } }],
    ["inference_geo", { inference_geo: "us" }],
    ["thinking.budget_tokens", { thinking: { type: "enabled", budget_tokens: 100 } }],
    ["thinking.budget_tokens", { max_tokens: 1000, thinking: { type: "enabled", budget_tokens: 1024 } }],
    ["thinking.type", { thinking: { type: "adaptive" } }],
    ["service_tier", { service_tier: "priority" }], ["metadata.foo", { metadata: { foo: "x" } }],
    ["temperature", { temperature: 1.5 }], ["top_k", { top_k: -1 }], ["stop_sequences", { stop_sequences: "STOP" }],
    ["tool_choice.type", { tools: [aTool], tool_choice: { type: "sometimes" } }],
    ["tool_choice", { tools: [aTool], tool_choice: { type: "tool", name: "nope" } }],
    ["max_tokens", { max_tokens: 0 }], ["foo", { foo: 1 }], ["cache_control", { cache_control: { type: "permanent" } }],
  ];
  for (const [param, extra] of walk) {
    const res = await rawPost("/v1/messages", { model: MODEL, max_tokens: 2000, messages: user("x"), ...extra });
    check(res.status === 400 && res.body?.type === "error" && res.body.error?.message?.startsWith(param),
      `messages field walk ${param}: ${res.status} ${JSON.stringify(res.body)}`);
  }
  // accepted fields
  const okf = await anthropic.messages.create({ model: MODEL, max_tokens: 3, messages: [{ role: "user", content: [
    { type: "text", text: "x", cache_control: { type: "ephemeral" } }] }], system: [{ type: "text", text: "s",
    cache_control: { type: "ephemeral", ttl: "1h" } }], temperature: 0.5, top_p: 0.9, top_k: 5, metadata: { user_id: "u" },
    service_tier: "standard_only", stop_sequences: ["zz"], cache_control: { type: "ephemeral" } });
  check(okf.usage.output_tokens === 3, "accepted fields");
  const cnt = await rawPost("/v1/messages/count_tokens", { model: MODEL, messages: user("x"), max_tokens: 5 });
  check(cnt.status === 400 && cnt.body?.error?.message.startsWith("max_tokens"), "count_tokens takes no max_tokens");
}

// ==== Both routes at once: 24 concurrent streams and whole answers share the batch ====
async function concurrent() {
  const jobs = [];
  for (let i = 0; i < 6; i++) {
    jobs.push(sse("/v1/responses", { model: MODEL, input: "Think about it." }).then((r) =>
      responsesOrder(r.events, `concurrent responses stream ${i}`).items.at(-1)?.content?.[0]?.text));
    jobs.push(sse("/v1/messages", { model: MODEL, max_tokens: 500, messages: user("Weather in Paris?"), tools: [aTool] }).then((r) =>
      JSON.stringify(messagesOrder(r.events, `concurrent messages stream ${i}`).blocks[0]?.input)));
    jobs.push(openai.responses.create({ model: MODEL, input: "Think about it." }).then((r) => r.output_text));
    jobs.push(anthropic.messages.create({ model: MODEL, max_tokens: 500, messages: user("Weather in Paris?"), tools: [aTool] })
      .then((m) => JSON.stringify(m.content[0]?.input)));
  }
  const got = await Promise.all(jobs);
  const want = ["The answer is 4.", JSON.stringify({ city: "Paris", unit: "celsius" })];
  check(got.every((g, i) => g === want[i % 2]), `24 concurrent answers: ${JSON.stringify(got)}`);
}

// ==== Demo model: the same greedy answer on every route ====
async function demo() {
  const q = 'What does "ocean" mean?';
  const chat = await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: q }], temperature: 0, max_tokens: 40 });
  const want = chat.choices[0].message.content;
  check(want.length > 0, `chat answer '${want}'`);
  const r = await openai.responses.create({ model: "m", input: q, temperature: 0, max_output_tokens: 40 });
  check(r.output_text === want, `responses = chat: '${r.output_text}'`);
  check(r.usage.input_tokens === chat.usage.prompt_tokens && r.usage.output_tokens === chat.usage.completion_tokens,
    "responses usage = chat usage");
  const rs = await sse("/v1/responses", { model: "m", input: q, temperature: 0, max_output_tokens: 40 });
  const ro = responsesOrder(rs.events, "demo responses stream");
  check(ro.items.length === 1 && ro.items[0].content[0].text === want, "streamed responses = chat");
  const m = await anthropic.messages.create({ model: "m", max_tokens: 40, temperature: 0, messages: user(q) });
  check(m.content.length === 1 && m.content[0].text === want, `messages = chat: '${m.content[0]?.text}'`);
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === chat.usage.prompt_tokens, "messages usage");
  const ms = anthropic.messages.stream({ model: "m", max_tokens: 40, temperature: 0, messages: user(q) });
  check((await ms.finalText()) === want, "streamed messages = chat");
  const ct = await anthropic.messages.countTokens({ model: "m", messages: user(q) });
  check(ct.input_tokens === chat.usage.prompt_tokens, `count_tokens ${ct.input_tokens} = prompt_tokens ${chat.usage.prompt_tokens}`);
  // a conversation continued through previous_response_id = the same conversation sent whole
  const r2 = await openai.responses.create({ model: "m", previous_response_id: r.id, input: 'What does "river" mean?',
    temperature: 0, max_output_tokens: 30 });
  const c2 = await openai.chat.completions.create({ model: "m", temperature: 0, max_tokens: 30, messages: [
    { role: "user", content: q }, { role: "assistant", content: want }, { role: "user", content: 'What does "river" mean?' }] });
  check(r2.output_text === c2.choices[0].message.content, `previous_response_id = the whole conversation: '${r2.output_text}'`);
}

try {
  if (mode === "fake") { await responsesFake(); await messagesFake(); await concurrent(); }
  else await demo();
} catch (e) {
  failures++;
  console.error(`FAIL [${mode}]: threw ${e.stack ?? e}`);
}
console.log(`apis e2e (${mode}): ${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
