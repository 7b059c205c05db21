// Which code points that the linked PCRE2 calls unassigned does the Hugging Face tokenizers
// library (Rust, Oniguruma's Unicode tables) put in each general category? Asked of the
// library itself: a Split pre-tokenizer removing [^\p{Cat}] leaves a token exactly when the
// code point is in Cat. Writes the C header of per-category ranges (PCRE2 class syntax).
//   node unicode_delta.mjs CN_LIST FORMS OUT.h   (tokenizers from ../node: npm ci there first)
import { createRequire } from "node:module";
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
const require = createRequire(import.meta.url);
const { Tokenizer } = require("../node/node_modules/tokenizers");
const version = require("../node/node_modules/tokenizers/package.json").version;
const [cnList, formsList, out] = process.argv.slice(2);
const cps = readFileSync(cnList, "utf8").trim().split("\n").map((l) => parseInt(l, 16));
const CATS = ["L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
  "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
  "Z", "Zs", "Zl", "Zp", "Cc", "Cf", "Co"]; // not C: PCRE2's \p{C} holds every unassigned one
const tmp = mkdtempSync(path.join(os.tmpdir(), "unidelta-"));
const strs = cps.map((c) => String.fromCodePoint(c));
const rows = [];
let total = 0;
for (const cat of CATS) {
  const tj = { version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: "Split", pattern: { Regex: `[^\\p{${cat}}]` }, behavior: "Removed", invert: false },
    post_processor: null, decoder: null, model: { type: "WordLevel", vocab: { "<unk>": 0 }, unk_token: "<unk>" } };
  const f = path.join(tmp, `${cat}.json`);
  writeFileSync(f, JSON.stringify(tj));
  const t = Tokenizer.fromFile(f);
  const res = await t.encodeBatch(strs, { addSpecialTokens: false });
  const members = cps.filter((c, i) => res[i].getIds().length > 0);
  const ranges = [];
  for (const c of members) {
    if (ranges.length && ranges[ranges.length - 1][1] === c - 1) ranges[ranges.length - 1][1] = c;
    else ranges.push([c, c]);
  }
  if (cat.length === 2) total += members.length;
  const hx = (c) => `\\\\x{${c.toString(16).toUpperCase()}}`;
  const text = ranges.map(([a, b]) => (a === b ? hx(a) : `${hx(a)}-${hx(b)}`)).join("");
  if (ranges.length) rows.push(`    {"${cat}", ${members.length}, "${text}"},`);
  console.error(`${cat}: ${members.length} code points, ${ranges.length} ranges`);
}
// ---- Normalizers: the same question for NFD, NFKD, Lowercase and StripAccents, every code
// point, the reference's output read back through a byte-fallback BPE (ids = UTF-8 bytes)
// and compared with utf8proc's (FORMS: utf8proc_forms.c's lines).
const forms = new Map();
for (const line of readFileSync(formsList, "utf8").trim().split("\n")) {
  const [c, nfd, nfkd, lower, mn, ccc, w] = line.split(" ");
  forms.set(parseInt(c, 16), { nfd, nfkd, lower, mn: mn === "1", ccc: parseInt(ccc, 10), word: w === "1" });
}
const all = [...forms.keys()];
const bytesVocab = {};
for (let b = 0; b < 256; b++) bytesVocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = b;
bytesVocab["<unk>"] = 256;
async function refForm(normalizer) {
  const tj = { version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer,
    pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: true, vocab: bytesVocab, merges: [] } };
  const f = path.join(tmp, `${normalizer.type}.json`);
  writeFileSync(f, JSON.stringify(tj));
  const t = Tokenizer.fromFile(f);
  const res = [];
  for (let i = 0; i < all.length; i += 20000) {
    const enc = await t.encodeBatch(all.slice(i, i + 20000).map((c) => String.fromCodePoint(c)), { addSpecialTokens: false });
    for (const e of enc) res.push([...Buffer.from(e.getIds()).toString("utf8")].map((ch) => ch.codePointAt(0).toString(16)).join(","));
  }
  return res;
}
const refNfd = await refForm({ type: "NFD" }), refNfkd = await refForm({ type: "NFKD" });
// A combining mark newer than tokenizers' tables is a starter there (combining class 0): it
// blocks canonical reordering. Probe every mark against U+0334 (class 1) after it and U+0345
// (class 240) before it; a mark not reordered as its class says is one it does not know.
const marks = all.filter((c) => forms.get(c).ccc > 0);
const nfdTok = Tokenizer.fromFile(path.join(tmp, "NFD.json"));
const nfdOf = async (strs) =>
  (await nfdTok.encodeBatch(strs, { addSpecialTokens: false })).map((e) => Buffer.from(e.getIds()).toString("utf8"));
const at = new Map(all.map((c, i) => [c, i]));
const p1 = await nfdOf(marks.map((c) => "a" + String.fromCodePoint(c) + "\u0334"));
const p2 = await nfdOf(marks.map((c) => "a\u0345" + String.fromCodePoint(c)));
const unknownMarks = marks.filter((c, i) => {
  if (refNfd[at.get(c)] !== c.toString(16)) return false; // it decomposes it: it knows it
  const m = String.fromCodePoint(c), k = forms.get(c).ccc;
  const want1 = k > 1 ? "a\u0334" + m : "a" + m + "\u0334", want2 = k < 240 ? "a" + m + "\u0345" : "a\u0345" + m;
  return p1[i] !== want1 || p2[i] !== want2;
});
const refLower = await refForm({ type: "Lowercase" }), refStrip = await refForm({ type: "StripAccents" });
// Word characters of an added token's single_word check (Rust regex \w): an added single_word
// token right after the code point matches exactly when the code point is not one.
const swJson = path.join(tmp, "single_word.json");
writeFileSync(swJson, JSON.stringify({ version: "1.0", truncation: null, padding: null,
  added_tokens: [{ id: 257, content: "\u00a7\u00a7", single_word: true, lstrip: false, rstrip: false, normalized: false, special: false }],
  normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null,
  model: { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: true, vocab: bytesVocab, merges: [] } }));
const swTok = Tokenizer.fromFile(swJson), refWord = [];
for (let i = 0; i < all.length; i += 20000) {
  const enc = await swTok.encodeBatch(all.slice(i, i + 20000).map((c) => String.fromCodePoint(c) + "\u00a7\u00a7"), { addSpecialTokens: false });
  for (const e of enc) refWord.push(!e.getIds().includes(257));
}
const wordFlip = all.filter((c, i) => refWord[i] !== forms.get(c).word);
const frozen = new Set(unknownMarks), lowerRows = [], stripRows = [];
all.forEach((c, i) => {
  const f = forms.get(c), self = c.toString(16);
  if (refNfd[i] !== f.nfd || refNfkd[i] !== f.nfkd) {
    if (refNfd[i] !== self || refNfkd[i] !== self)
      throw new Error(`U+${self}: tokenizers decomposes it (${refNfd[i]} / ${refNfkd[i]}) otherwise than utf8proc (${f.nfd} / ${f.nfkd}): not a code point it leaves alone`);
    frozen.add(c);
    const parts = f.nfd.split(",");
    if (parts.length > 1) frozen.add(parseInt(parts[parts.length - 1], 16)); // its composition's second half
  }
  if (refLower[i] !== f.lower) {
    const cps = refLower[i].split(",");
    if (cps.length !== 1) throw new Error(`U+${self}: lowercase to ${cps.length} code points`);
    lowerRows.push(`{0x${self.toUpperCase()}, 0x${cps[0].toUpperCase()}}`);
  }
  if ((refStrip[i] === "") !== f.mn) stripRows.push(`0x${self.toUpperCase()}`);
});
const fr = [...frozen].sort((a, b) => a - b), frRanges = [];
for (const c of fr) {
  if (frRanges.length && frRanges[frRanges.length - 1][1] === c - 1) frRanges[frRanges.length - 1][1] = c;
  else frRanges.push([c, c]);
}
const hex = (c) => `0x${c.toString(16).toUpperCase()}`;
const toRanges = (list) => {
  const r = [];
  for (const c of list) {
    if (r.length && r[r.length - 1][1] === c - 1) r[r.length - 1][1] = c;
    else r.push([c, c]);
  }
  return r;
};
const wordRanges = toRanges(wordFlip);
console.error(`normalizers: ${fr.length} code points left alone (${unknownMarks.length} marks it does not know), ${lowerRows.length} lowercase, ${stripRows.length} StripAccents, ${wordFlip.length} word characters (${wordRanges.length} ranges)`);
const wrap = (items) => items.map((x, i) => (i % 6 === 0 ? "\n    " : " ") + x + ",").join("");
const normPart = `
/* Normalization: tokenizers' tables (unicode-normalization-alignments) are older than utf8proc
 * ${"2.8's"}: these code points it leaves unchanged under NFD / NFKD (so NFC / NFKC too), the
 * second halves of the compositions it does not know, and the combining marks it does not know
 * (to it starters: they block reordering), as [first, last] ranges. */
static const uint32_t k_norm_frozen[][2] = {${wrap(frRanges.map(([a, b]) => `{${hex(a)}, ${hex(b)}}`))}
};
/* Lowercase: code points whose lowercase tokenizers (Rust's char tables) knows and utf8proc
 * does not (or otherwise), sorted: {code point, lowercase}. */
static const uint32_t k_lower_delta[][2] = {${wrap(lowerRows)}
};
/* Added tokens' single_word check: code points whose word-ness (Rust regex \w) differs from
 * letters, marks, Nd, Nl, Pc, ZWNJ and ZWJ by utf8proc's categories, as [first, last] ranges. */
static const uint32_t k_word_delta[][2] = {${wrap(wordRanges.map(([a, b]) => `{${hex(a)}, ${hex(b)}}`))}
};
/* StripAccents: code points whose mark-ness (Mn, Mc, Me) differs (utf8proc's decision flipped). */
static const uint32_t k_strip_delta[] = {${stripRows.length ? wrap(stripRows) : "\n    0x110000, /* none */"}
};
`;
writeFileSync(out, `/* Generated by tools/reference/unicode/make_unicode_delta.sh (tokenizers ${version} node
 * bindings against the build machine's PCRE2): do not edit. Per general category, the code
 * points that tokenizers' Unicode tables assign to it and this PCRE2's tables leave
 * unassigned (${total} in all), as PCRE2 class items. */
typedef struct tk_uni_delta {
    const char *cat;
    int n;              /* code points */
    const char *ranges; /* "\\\\x{A}-\\\\x{B}..." */
} tk_uni_delta;
static const tk_uni_delta k_uni_delta[] = {
${rows.join("\n")}
};
${normPart}`);
