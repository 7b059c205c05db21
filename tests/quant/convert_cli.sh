#!/bin/sh
# mlxcel convert end to end through the binary: quantize a tiny checkpoint, load the result
# with inspect, dequantize it back, and check that bad flags fail with a message.
# usage: convert_cli.sh MLXCEL_BIN SOURCE_DIR
set -u
bin=$1
src=$2/tests/fixtures/ckpt/llama_tiny
tmp=$(mktemp -d /tmp/mlxcel_cvcli_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin" convert --hf-path "$src" --mlx-path "$tmp/q" -q --q-bits 6 --q-group-size 32 \
    --dtype bfloat16 2>"$tmp/log" || fail "convert -q: $(cat "$tmp/log")"
grep -q "wrote $tmp/q (quantized)" "$tmp/log" || fail "no final line: $(cat "$tmp/log")"
"$bin" inspect -m "$tmp/q" >"$tmp/inspect" 2>&1 || fail "inspect: $(cat "$tmp/inspect")"
grep -q "MLX affine 6-bit group 32" "$tmp/inspect" || fail "inspect: $(cat "$tmp/inspect")"
"$bin" convert --hf-path "$tmp/q" --mlx-path "$tmp/d" -d --no-progress || fail "convert -d"
"$bin" inspect -m "$tmp/d" >"$tmp/inspect2" 2>&1 || fail "inspect -d: $(cat "$tmp/inspect2")"
grep -q "MLX affine" "$tmp/inspect2" && fail "dequantized output still quantized"

# errors: exit status 2 for usage, 1 for conversion failures, one message each
"$bin" convert --hf-path "$src" --mlx-path "$tmp/x" --q-mode mxfp4 2>"$tmp/e1"
[ $? -eq 2 ] && grep -q "q-mode mxfp4 is not supported" "$tmp/e1" || fail "q-mode: $(cat "$tmp/e1")"
"$bin" convert --hf-path "$src" --mlx-path "$tmp/x" --upload-repo a/b 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "unknown option" "$tmp/e2" || fail "unknown option: $(cat "$tmp/e2")"
"$bin" convert --hf-path "$src" --mlx-path "$tmp/q" 2>"$tmp/e3"
[ $? -eq 1 ] && grep -q "already exists" "$tmp/e3" || fail "exists: $(cat "$tmp/e3")"
"$bin" convert --hf-path "$tmp/nope" --mlx-path "$tmp/x" 2>"$tmp/e4"
[ $? -eq 1 ] || fail "missing input accepted"
[ -e "$tmp/x" ] && fail "output left behind after a failure"
echo "convert_cli: ok"
