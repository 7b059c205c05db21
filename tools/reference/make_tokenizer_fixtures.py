#!/usr/bin/env python3
"""Expected tokenizer outputs from the Hugging Face `tokenizers` library.

    python3 tools/reference/make_tokenizer_fixtures.py NPM_DIR OUTDIR

NPM_DIR is what tools/fetch_tokenizers.sh produced (NPM_DIR/<name>/tokenizer.json, PACKAGE).
Reads tests/fixtures/tokenizers/strings.json from the repo, writes
OUTDIR/tests/fixtures/tokenizers/<name>.json for llama3, qwen3, mistral:
  {"package", "tokenizer_sha256", "tokenizers_version", "strings_sha256",
   "cases": [{"text", "ids", "ids_special", "decoded", "decoded_skip"}]}
  ids          = encode(text, add_special_tokens=False).ids
  ids_special  = encode(text, add_special_tokens=True).ids
  decoded      = decode(ids_special, skip_special_tokens=False)
  decoded_skip = decode(ids_special, skip_special_tokens=True)
Special-token text inside a string is matched as the special token (tokenizers' default,
split_special_tokens=False), exactly as a C tokenizer must do for prompt text.
"""
import hashlib
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer

NAMES = ["llama3", "qwen3", "mistral"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_doc(path, doc):
    """JSON with one case per line, so fixture diffs stay readable."""
    cases = doc.pop("cases")
    head = json.dumps(doc, ensure_ascii=True)[:-1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + ',\n"cases":[\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=True) for c in cases))
        f.write("\n]}\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    npm_dir, outdir = sys.argv[1], sys.argv[2]
    strings_path = os.path.join(REPO, "tests", "fixtures", "tokenizers", "strings.json")
    strings = json.load(open(strings_path, encoding="utf-8"))["strings"]
    dest = os.path.join(outdir, "tests", "fixtures", "tokenizers")
    os.makedirs(dest, exist_ok=True)
    failed = 0
    for name in NAMES:
        try:
            tok_path = os.path.join(npm_dir, name, "tokenizer.json")
            pkg_path = os.path.join(npm_dir, name, "PACKAGE")
            package = open(pkg_path).read().strip() if os.path.exists(pkg_path) else "?"
            tok = Tokenizer.from_file(tok_path)
            cases = []
            for s in strings:
                ids = tok.encode(s, add_special_tokens=False).ids
                ids_sp = tok.encode(s, add_special_tokens=True).ids
                cases.append({
                    "text": s,
                    "ids": ids,
                    "ids_special": ids_sp,
                    "decoded": tok.decode(ids_sp, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids_sp, skip_special_tokens=True),
                })
            doc = {
                "package": package,
                "tokenizer_sha256": sha256_file(tok_path),
                "tokenizers_version": tokenizers.__version__,
                "strings_sha256": sha256_file(strings_path),
                "generator": "tools/reference/make_tokenizer_fixtures.py",
                "cases": cases,
            }
            out = os.path.join(dest, name + ".json")
            write_doc(out, doc)
            n_tok = sum(len(c["ids"]) for c in cases)
            print(f"{name}: {len(cases)} cases, {n_tok} tokens -> {out}")
        except Exception as e:  # one tokenizer failing must not stop the others
            failed += 1
            print(f"{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
