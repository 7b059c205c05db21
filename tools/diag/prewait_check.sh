#!/usr/bin/env bash
# GPU machine (session 20): the one-row qmv_i8 launches' pre-wait stages (MLXCEL_QMV_PREWAIT,
# qw_pre in qmv_frame.cuh): test_cuda's quant / e2e / attn groups, then 8B B=1 decode with
# the stages at the default / 0 / 1 / 2, interleaved, q4g64 then q8g64 (synthetic weights,
# MLX-converted), then the q4 step with each one-row launch kind left out (MLXCEL_DIAG_SKIP).
# Carry .carry/devpack.tar.xz.   bash tools/diag/prewait_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e,attn
P=MLXCEL_QMV_PREWAIT
AB="${PRE_AB:-$P=1 $P=0 $P=2 $P=1 $P=0 $P=2}" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 200 "^== conv"
echo "== q4: $((SECONDS - T0)) s"
AB="${PRE_AB8:-$P=1 $P=0 $P=1 $P=0}" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 diag_quant 150 "^== conv"
echo "== q8: $((SECONDS - T0)) s"
ab="-"; for s in ${SKIPS-attn qkv o gu down}; do ab="$ab MLXCEL_DIAG_SKIP=$s"; done
AB="$ab" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 150 "^== conv"
echo "== end: $((SECONDS - T0)) s"
