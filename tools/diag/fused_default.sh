#!/usr/bin/env bash
# GPU machine, one call (~4.5 min): session 13's defaults (MLXCEL_GEMV_FUSE=1
# MLXCEL_GEMV_ROPE=1: five kernels a layer at 1..2 decode rows). test_cuda in full with them
# and its ops + e2e groups with both off (the unfused path still right), then 8B / 1B B=1:
# as is, both off, and the B=1 settings again on top of the fusion (attention walk, K split,
# attention splits and merge, early weight loads); 8B B=2 as is against both off.
# Carry .carry/devpack.tar.xz (bench/pack_device.sh).
#   bash tools/diag/fused_default.sh
set -u
. bench/device_env.sh
diag_init
diag_tests MLXCEL_GEMV_FUSE=0,MLXCEL_GEMV_ROPE=0
OFF=MLXCEL_GEMV_FUSE=0,MLXCEL_GEMV_ROPE=0
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $OFF MLXCEL_ATTN_TC=0 MLXCEL_GEMV_KSPLIT=1 MLXCEL_GEMV_KSPLIT=4 \
MLXCEL_PAGED_DECODE_SPLITS=8 MLXCEL_PAGED_DECODE_SPLITS=32 MLXCEL_ATTN_CLUSTER=0 \
MLXCEL_GEMV_EARLY=0" diag_ab 260
echo "== bench B=1: $((SECONDS - T0)) s"
SHAPES=llama-3.1-8b BATCH=2 REPEAT=2 AB="- $OFF" diag_ab 60
echo "== done: $((SECONDS - T0)) s"
