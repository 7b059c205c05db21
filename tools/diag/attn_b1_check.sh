#!/usr/bin/env bash
# GPU machine, one call (~2 min): B=1 decode attention (session 18: the cluster merge by
# st.async stores counted on each receiver's mbarrier instead of a cluster barrier; a first
# version also issued the first chunks' copies before q's load, reverted). test_cuda's attn +
# e2e groups; bench/attn_timeline.cu
# before (.carry/tl/attn_base, attn_tlbase: the previous attn_decode.cu) and now (attn_notl,
# attn_tl), interleaved, and one stamped run each; B=1 decode against the build before
# (BIN=mlxcel-base): 8B / 1B bf16 on dummy weights, the synthetic 8B as MLX q4g64.
# Carry .carry/devpack.tar.xz (with dev/mlxcel-base) and .carry/tl.tar.xz (the four harness
# builds; with the tracked tree the carry must stay under 64 MiB).
#   bash tools/diag/attn_b1_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - attn,e2e
for i in 1 2 3; do
  for b in attn_base attn_notl; do echo "$b $(timeout 60 .carry/tl/$b 30 2>&1 | head -1)"; done
done
for b in attn_tlbase attn_tl; do echo "== $b"; timeout 60 .carry/tl/$b 30 2>&1 | tail -11; done
echo "== attn_tl, ATTN_CLUSTER=0 (the global merge)"
ATTN_CLUSTER=0 timeout 60 .carry/tl/attn_tl 30 2>&1 | tail -11
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- BIN=mlxcel-base - BIN=mlxcel-base" BATCH=1 REPEAT=2 \
  diag_ab 220
echo "== $((SECONDS - T0)) s"
AB="- BIN=mlxcel-base - BIN=mlxcel-base" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 200 \
  "^== conv"
echo "== done: $((SECONDS - T0)) s"
