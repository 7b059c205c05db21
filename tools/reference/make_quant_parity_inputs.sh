#!/bin/sh
# Inputs of the quantized-model parity test (tests/unit/test_quant_parity.c): for each tiny
# checkpoint, an MLX-quantized copy (mlxcel convert -q) and its dequantized twin (-d), under
# tests/fixtures/quant_parity/<name>/{q,deq}. Runs here (needs only the mlxcel binary);
# tools/reference/quant_parity.py then writes <name>/expected.json from deq on the GPU machine.
#   sh tools/reference/make_quant_parity_inputs.sh MLXCEL_BIN [BITS GROUP [NAME...]]
# NAME...: only these sources (e.g. llama_tiny qwen2), so that a regeneration rewrites only the
# twins of the sources that changed (tools/reference/regen_echo.sh).
set -eu
bin=$1
bits=${2:-4}
gs=${3:-32}
if [ $# -gt 3 ]; then shift 3; else set --; fi
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/tests/fixtures/quant_parity
mkdir -p "$out"
srcs=""
for n in llama_tiny gemma3_sliding qwen3_moe_tiny qwen3_sharded mixtral_mlx; do
    srcs="$srcs $root/tests/fixtures/ckpt/$n"
done
# golden models (tools/reference/make_fixtures.py): one per family shape that matters here
for n in llama qwen2 qwen3_moe mixtral gemma3_text; do
    d=$root/tests/fixtures/models/$n
    [ -f "$d/config.json" ] && srcs="$srcs $d"
done
for s in $srcs; do
    if [ $# -gt 0 ]; then
        case " $* " in *" $(basename "$s") "*) ;; *) continue ;; esac
    fi
    name=$(basename "$s")_q${bits}g${gs}
    rm -rf "$out/$name/q" "$out/$name/deq"
    mkdir -p "$out/$name"
    "$bin" convert --hf-path "$s" --mlx-path "$out/$name/q" -q --q-bits "$bits" --q-group-size "$gs" --no-progress
    "$bin" convert --hf-path "$out/$name/q" --mlx-path "$out/$name/deq" -d --no-progress
    echo "$name: $(du -sk "$out/$name" | cut -f1) KiB"
done
