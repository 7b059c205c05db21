// Single-threaded encode throughput of the Hugging Face `tokenizers` library (official Node
// bindings of the same Rust crate) on a text file, with bench_tokenizers.py's chunk rule:
// whole lines appended to a chunk until it holds >= 4096 UTF-8 bytes. Best of N runs.
//   RAYON_NUM_THREADS=1 node tools/reference/node/bench_tokenizers.mjs NPM_DIR TEXT_FILE [N]
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

process.env.RAYON_NUM_THREADS = "1";
process.env.TOKENIZERS_PARALLELISM = "false";
const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
const version = require("tokenizers/package.json").version;

const [npmDir, textFile, repeatsArg] = process.argv.slice(2);
const repeats = Number(repeatsArg || 3);
const buf = readFileSync(textFile);
const chunks = [];
let cur = [], curBytes = 0, start = 0;
for (let i = 0; i < buf.length; i++) {
  if (buf[i] === 0x0a || i === buf.length - 1) {
    const line = buf.subarray(start, i + 1);
    start = i + 1;
    cur.push(line);
    curBytes += line.length;
    if (curBytes >= 4096) { chunks.push(Buffer.concat(cur).toString("utf8")); cur = []; curBytes = 0; }
  }
}
if (cur.length) chunks.push(Buffer.concat(cur).toString("utf8"));
const results = {};
for (const name of ["llama3", "qwen3", "mistral"]) {
  const tok = Tokenizer.fromFile(path.join(npmDir, name, "tokenizer.json"));
  let best = Infinity, tokens = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const c of chunks) n += (await tok.encode(c, null, { addSpecialTokens: false })).getLength();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (s < best) best = s;
    tokens = n;
  }
  results[name] = { mb_per_s: +(buf.length / 1e6 / best).toFixed(2), seconds: +best.toFixed(3), tokens };
}
console.log(JSON.stringify({ text_bytes: buf.length, chunks: chunks.length, tokenizers_version: `${version} (node bindings)`, results }));
