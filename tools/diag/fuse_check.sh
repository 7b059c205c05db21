#!/usr/bin/env bash
# GPU machine, one call (~3.5 min): the norm fused into the GEMV (MLXCEL_GEMV_FUSE) and RoPE
# in its epilogue (MLXCEL_GEMV_ROPE) against the small kernels skipped outright
# (MLXCEL_DIAG_SKIP: the bound a fusion can reach), this build and the build before the
# session-12 fusion changes (BIN=mlxcel-base: pack with `BASE=67ecc1c XZ=1 bash
# bench/pack_device.sh`). test_cuda's ops + e2e groups with the fusions on first (the ops
# group has test_gemv_norm / test_gemv_rope at K split 1, 2, 4), then per-kernel times of an
# 8B step fused (step_ncu.sh). Carry .carry/devpack.tar.xz.
#   bash tools/diag/fuse_check.sh
set -u
. bench/device_env.sh
diag_init
F=MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1
diag_test "$F" ops,e2e
B=$(diag_base "$F,")
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $F $B MLXCEL_GEMV_FUSE=1 MLXCEL_DIAG_SKIP=norm+glu+rope \
MLXCEL_DIAG_SKIP=attn+norm+glu+rope" diag_ab 150
echo "== bench: $((SECONDS - T0)) s"
SHAPES=llama-3.1-8b AB="$F" COUNT=600 timeout 120 bash tools/diag/step_ncu.sh
echo "== done: $((SECONDS - T0)) s"
