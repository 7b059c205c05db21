#!/usr/bin/env bash
# GPU machine, one call (~2.5 min): the norm, GLU and RoPE fused into the GEMVs
# (MLXCEL_GEMV_FUSE=1 MLXCEL_GEMV_ROPE=1; since session 13 the GLU epilogue and the RoPE
# epilogue actually engage in the decode step) with test_cuda's ops + e2e groups first, then
# 8B / 1B B=1: as is, fused, and fused without each of a layer's four GEMVs
# (MLXCEL_DIAG_SKIP=qkv|o|gu|down: what each costs on the chain, against its bytes at copy
# speed), then an 8B fused step profile. Carry .carry/devpack.tar.xz (bench/pack_device.sh).
#   bash tools/diag/gemv_cost.sh
set -u
. bench/device_env.sh
diag_init
F=MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1
diag_test "$F" ops,e2e
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $F $F,MLXCEL_DIAG_SKIP=qkv $F,MLXCEL_DIAG_SKIP=o $F,MLXCEL_DIAG_SKIP=gu \
$F,MLXCEL_DIAG_SKIP=down $F,MLXCEL_DIAG_SKIP=attn" diag_ab 200
echo "== bench: $((SECONDS - T0)) s"
SHAPES=llama-3.1-8b AB="$F" COUNT=600 timeout 120 bash tools/diag/step_ncu.sh
echo "== done: $((SECONDS - T0)) s"
