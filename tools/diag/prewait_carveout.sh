#!/usr/bin/env bash
# GPU machine (next session's first q4 call, ~3 min): were session 20's pre-wait stages
# (commit 02f6ec3, reverted by f7175ef) slower only because their larger shared memory gave
# the qmv_i8 launches another carveout than their neighbours, so PDL could not start them
# early on SMs still running the previous kernel (session 18's finding)? 8B q4g64 B=1, the
# stages build beside the default one, with and without MLXCEL_CUDA_PREFER_SHARED=1 (every
# kernel the largest carveout: one configuration for the whole chain), interleaved.
# Pack first: BASE=02f6ec3 XZ=1 bash bench/pack_device.sh (the stages build as mlxcel-base).
# Carry .carry/devpack.tar.xz.   bash tools/diag/prewait_carveout.sh
set -u
. bench/device_env.sh
diag_init
[ -x .carry/dev/mlxcel-base ] || { echo "no .carry/dev/mlxcel-base (BASE=02f6ec3 pack)"; exit 1; }
B=BIN=mlxcel-base P=MLXCEL_QMV_PREWAIT S=MLXCEL_CUDA_PREFER_SHARED=1
AB="- $B,$P=0 $B,$P=2 $S $B,$S,$P=0 $B,$S,$P=1 $B,$S,$P=2 - $B,$S,$P=2 $S" BATCH=1 REPEAT=2 \
  QUANT="4:64" BF16=0 diag_quant 300 "^== conv"
echo "== end: $((SECONDS - T0)) s"
