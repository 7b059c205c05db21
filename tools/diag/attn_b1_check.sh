#!/usr/bin/env bash
# GPU machine, one call (~4 min): a decode-attention change against the build before it
# (.carry/dev/mlxcel-base, packed beside: cp the old build's mlxcel there before tar). test_cuda
# as is; the attention op bench (its B=1 rows against bench/results/2026-12-03-optin-attn.log);
# 8B / 1B bf16 decode at B=1, 8, 32, new and base. Carry .carry/devpack.tar.xz.
#   bash tools/diag/attn_b1_check.sh
set -u
. bench/device_env.sh
diag_init
diag_tests
timeout 150 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn (auto|tc|cc) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' |
  cut -c1-80
grep -E "FAIL" "$D/attn.log" | head -3
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- BIN=mlxcel-base" BATCH=${BATCH:-1,8,32} REPEAT=2 \
  diag_ab 240
echo "== done: $((SECONDS - T0)) s"
