#!/usr/bin/env bash
# GPU machine, one call (~4 min): the split-merge change (merge_check.sh) at B=8 and 32, where
# the splits merge through global memory or not at all: 8B bf16 and the synthetic 8B as MLX
# q4g64 against the build before (BIN=mlxcel-base); the attention op bench's rows (new only).
# Carry .carry/devpack.tar.xz (`BASE=<the commit before> XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/merge_batch_check.sh
set -u
. bench/device_env.sh
diag_init
timeout 120 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn (auto|tc) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' |
  cut -c1-80 | head -16
B=$(diag_base)
SHAPES="llama-3.1-8b" BATCH=8,32 REPEAT=2 AB="- $B" diag_ab 120
echo "== bf16: $((SECONDS - T0)) s"
AB="- $B" BATCH=8,32 REPEAT=1 QUANT="4:64" BF16=0 diag_quant 150 "^== conv"
echo "== done: $((SECONDS - T0)) s"
