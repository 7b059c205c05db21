#!/usr/bin/env bash
# GPU machine, one call (~8 min): the one-row qmv_i8 fusions (MLXCEL_QMV_I8_INPREP: x prep
# inside the qmv CTAs, residual adds in the o / down epilogues, the GLU + the down's int8 x in
# the gate/up epilogue). test_cuda's quant group with it on (default) and off; the synthetic
# 8B as MLX q4g64: greedy tokens on and off (64 tokens: the same math, so the same tokens),
# then decode B=1 on / off interleaved (median of 3) and B=8 once; q8g64 through qmv_i8
# (MLXCEL_QMV_I8_Q8=1) on / off. Carry .carry/devpack.tar.xz.
#   bash tools/diag/inprep_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e
diag_test MLXCEL_QMV_I8_INPREP=0 quant
BATCH=1 QUANT="4:64 8:64" BF16=0 BENCH=0 timeout 400 bash tools/diag/quant_b1.sh | grep '^=='
W=/tmp/mlxcel-dev/llama-3.1-8b
ids=$(seq -s, 100 163)
for e in - MLXCEL_QMV_I8_INPREP=0; do
  env $(ab_env "$e") timeout 60 .carry/dev/mlxcel generate -m "$W-q4g64" --device cuda \
    --prompt-ids "$ids" -n 64 --temp 0 --ignore-eos --json 2> "$D/gen.log" |
    python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))' \
    > "$D/tok-${e%%=*}.txt" || tail -2 "$D/gen.log"
done
cmp -s "$D/tok--.txt" "$D/tok-MLXCEL_QMV_I8_INPREP.txt" && echo "== tokens: identical" ||
  { echo "== tokens DIFFER"; head -c 300 "$D"/tok-*.txt; }
echo "== $((SECONDS - T0)) s"
AB="- MLXCEL_QMV_I8_INPREP=0 - MLXCEL_QMV_I8_INPREP=0" BATCH=1 REPEAT=3 QUANT="4:64" BF16=0 \
  diag_quant 200
AB="- MLXCEL_QMV_I8_INPREP=0" BATCH=8 REPEAT=1 QUANT="4:64" BF16=0 diag_quant 100
AB="MLXCEL_QMV_I8_Q8=1 MLXCEL_QMV_I8_Q8=1,MLXCEL_QMV_I8_INPREP=0 -" BATCH=1 REPEAT=2 \
  QUANT="8:64" BF16=0 diag_quant 150
echo "== done: $((SECONDS - T0)) s"
