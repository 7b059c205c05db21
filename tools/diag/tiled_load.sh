#!/usr/bin/env bash
# GPU machine: quantized weights repacked at load (MLXCEL_QMV_TILED, default on; session 16).
# PART=tests (~4 min): test_cuda's quant and e2e groups (every tiled launch against the MLX
# layout's, the demo model converted and loaded both ways), then the op bench's qmv suite at
# QMV_ROWS (default 32: qmv_bulk on either layout). PART=e2e (~7 min): the synthetic 8B as MLX
# q4g64 and q8g64, `mlxcel bench` at B=1,8,32, tiled (as is) and MLXCEL_QMV_TILED=0.
# PART=prefill (~3 min): prefill of a 2048-token prompt, bf16 against q4g64 (both ways), q8g64.
# Carry .carry/devpack.tar.xz (`XZ=1 bash bench/pack_device.sh`).
#   PART=tests bash tools/diag/tiled_load.sh
set -u
. bench/device_env.sh
diag_init
if [ "${PART:-tests}" = prefill ]; then # a 2048-token prompt, B=1: bf16, q4g64 both ways
  BENCH=0 QUANT="4:64 8:64" bash tools/diag/quant_b1.sh | grep "^=="
  W=/tmp/mlxcel-dev/llama-3.1-8b
  for run in "$W -" "$W-q4g64 -" "$W-q4g64 MLXCEL_QMV_TILED=0" "$W-q8g64 -"; do
    set -- $run
    env $(ab_env "$2") timeout 120 .carry/dev/mlxcel bench -m "$1" --device cuda \
      --prompt-tokens 2048 --gen-tokens 16 --batch 1 --repeat 2 2>/dev/null |
      awk -v n="$(basename "$1") $2" '/^ +[0-9]+ / {print n, "B=" $1, "prefill", $2, "TTFT", $3}'
  done
elif [ "${PART:-tests}" = tests ]; then
  diag_test - quant,e2e
  grep -E "repacked|tiled" "$D/test--.log" | grep -v "^ok.*bitwise" | head -12 | cut -c1-150
  echo "== tiled checks: $(grep -c 'tiled' "$D/test--.log") lines, $(grep 'tiled' "$D/test--.log" |
    grep -c '^FAIL') failed"
  QMV_ROWS=${QMV_ROWS:-32} diag_qmv_bench "${QMV_RE:-^(qmv_bulk0 q|qmv_bulk. tiled)|FAIL}"
else
  diag_test - quant
  AB="- MLXCEL_QMV_TILED=0" BATCH=1,8,32 REPEAT=2 QUANT="4:64 8:64" BF16=0 \
    diag_quant 560 "^== conv"
fi
echo "== done: $((SECONDS - T0)) s"
