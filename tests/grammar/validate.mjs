// Validates the outputs of schema_random (one JSON line per schema: {i, schema, output, cut,
// tokens}) with ajv (draft 2020-12, formats from ajv-formats): every finished output must parse
// with JSON.parse and validate against its schema. Outputs cut at the token budget are counted,
// not validated (schema_random fails itself when a cut schema's shortest instance did not fit).
// usage: node validate.mjs OUT.jsonl [MIN_SCHEMAS]
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
addFormats(ajv);
const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.length);
const minSchemas = Number(process.argv[3] ?? 1);
let ok = 0, cut = 0, bad = 0;
for (const l of lines) {
  const r = JSON.parse(l);
  if (r.cut) { cut++; continue; }
  let v;
  try {
    v = JSON.parse(r.output);
  } catch (e) {
    bad++;
    console.error(`schema ${r.i}: output does not parse (${e.message}): ${JSON.stringify(r.output)}\n  schema: ${JSON.stringify(r.schema)}`);
    continue;
  }
  let validate;
  try {
    validate = ajv.compile(r.schema);
  } catch (e) {
    bad++;
    console.error(`schema ${r.i}: ajv refuses the schema (${e.message}): ${JSON.stringify(r.schema)}`);
    continue;
  }
  if (validate(v)) { ok++; continue; }
  bad++;
  console.error(`schema ${r.i}: output does not validate: ${ajv.errorsText(validate.errors)}\n  output: ${JSON.stringify(r.output)}\n  schema: ${JSON.stringify(r.schema)}`);
}
console.log(`validate.mjs: ${lines.length} outputs: ${ok} valid, ${bad} invalid, ${cut} cut at the token budget (not checked)`);
if (bad || lines.length < minSchemas || ok < lines.length * 0.9) process.exit(1);
