// Expected tokenizer outputs from the Hugging Face `tokenizers` library through its official
// Node bindings (npm `tokenizers`, the same Rust crate as the Python package of that version).
// Same output format as make_tokenizer_fixtures.py, usable where no Python `tokenizers` exists.
//
//   (cd tools/reference/node && npm ci) && node tools/reference/node/make_tokenizer_fixtures.mjs NPM_DIR OUTDIR
//       [--names a,b,c] [--strings FILE]
// --names: other tokenizers of NPM_DIR (default: the three of the committed fixtures);
// --strings: other {"strings": [...]} files, comma-separated, concatenated (default:
// tests/fixtures/tokenizers/strings.json).
// The output goes to OUTDIR/tests/fixtures/tokenizers/<name>.json, the layout that
// test_tokenizer_parity reads (`test_tokenizer_parity DIR NAME...` for names other than the three).
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
const version = require("tokenizers/package.json").version;

let NAMES = ["llama3", "qwen3", "mistral"];
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

const sha256 = (p) => createHash("sha256").update(readFileSync(p)).digest("hex");
// Python's json.dumps(ensure_ascii=True): non-ASCII as \uXXXX (surrogate pairs), so the files
// match the Python generator's layout byte for byte in spirit.
const asciiJson = (v) =>
  JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));

const args = process.argv.slice(2);
let stringsPath = path.join(REPO, "tests", "fixtures", "tokenizers", "strings.json");
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--names") NAMES = args[++i].split(",");
  else if (args[i] === "--strings") stringsPath = args[++i].split(",").map((f) => path.resolve(f)).join(",");
  else pos.push(args[i]);
}
const [npmDir, outDir] = pos;
if (!npmDir || !outDir) {
  console.error("usage: make_tokenizer_fixtures.mjs NPM_DIR OUTDIR [--names a,b,c] [--strings FILE]");
  process.exit(2);
}
const strings = stringsPath.split(",").flatMap((f) => JSON.parse(readFileSync(f, "utf8")).strings);
const dest = path.join(outDir, "tests", "fixtures", "tokenizers");
mkdirSync(dest, { recursive: true });
let failed = 0;
for (const name of NAMES) {
  try {
    const tokPath = path.join(npmDir, name, "tokenizer.json");
    const pkgPath = path.join(npmDir, name, "PACKAGE");
    const pkg = existsSync(pkgPath) ? readFileSync(pkgPath, "utf8").trim() : "?";
    const tok = Tokenizer.fromFile(tokPath);
    const cases = [];
    for (const s of strings) {
      const ids = (await tok.encode(s, null, { addSpecialTokens: false })).getIds();
      const idsSp = (await tok.encode(s, null, { addSpecialTokens: true })).getIds();
      cases.push({
        text: s,
        ids,
        ids_special: idsSp,
        decoded: await tok.decode(idsSp, false),
        decoded_skip: await tok.decode(idsSp, true),
      });
    }
    const head = {
      package: pkg,
      tokenizer_sha256: sha256(tokPath),
      tokenizers_version: `${version} (node bindings)`,
      strings_sha256: stringsPath.split(",").map(sha256).join(","),
      generator: "tools/reference/node/make_tokenizer_fixtures.mjs",
    };
    const out = path.join(dest, `${name}.json`);
    writeFileSync(out, asciiJson(head).slice(0, -1) + ',\n"cases":[\n' + cases.map(asciiJson).join(",\n") + "\n]}\n");
    console.log(`${name}: ${cases.length} cases, ${cases.reduce((a, c) => a + c.ids.length, 0)} tokens -> ${out}`);
  } catch (e) {
    failed++;
    console.error(`${name}: FAILED: ${e}`);
  }
}
process.exit(failed ? 1 : 0);
