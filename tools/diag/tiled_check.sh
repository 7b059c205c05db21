#!/usr/bin/env bash
# GPU machine, one call (~5 min): the tiled qmv_i8 weight copies (MLXCEL_QMV_TILED, session
# 16): test_cuda's quant and e2e groups (the tiled launches bitwise against the MLX layout's),
# the op bench's qmv suite at one row (qmv_i8 plain / in-CTA x, MLX layout against tiled),
# then the synthetic 8B as MLX q4g64 and q8g64 at B=1, off and on interleaved. Carry
# .carry/devpack.tar.xz (`XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/tiled_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e
QMV_ROWS=1 diag_qmv_bench "qmv_i8|FAIL"
AB="- MLXCEL_QMV_TILED=1 - MLXCEL_QMV_TILED=1" BATCH=1 REPEAT=2 QUANT="4:64 8:64" BF16=0 \
  diag_quant 260 "^== conv"
echo "== done: $((SECONDS - T0)) s"
