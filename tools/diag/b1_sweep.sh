#!/usr/bin/env bash
# GPU machine, one call (~3 min): the B=1 decode settings that trade launches and splits,
# re-measured as is: forced decode-attention splits, the norm fused into the GEMV (+ RoPE),
# an L2 weight prefetch per GEMV CTA, the split merge through global memory. 8B and 1B bf16,
# prompt 512, gen 128, median of 3. Carry .carry/devpack.tar.xz.
#   bash tools/diag/b1_sweep.sh
set -u
. bench/device_env.sh
diag_init
P=MLXCEL_PAGED_DECODE_SPLITS
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=3 \
  AB="- $P=4 $P=8 $P=16 $P=32 MLXCEL_GEMV_FUSE=1 MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1 \
MLXCEL_GEMV_PREFETCH_KB=64 MLXCEL_ATTN_CLUSTER=0" diag_ab 400
echo "== done: $((SECONDS - T0)) s"
