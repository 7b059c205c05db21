#!/usr/bin/env bash
# GPU machine, one call (~5 min): the two opt-ins written at the end of session 11, never run.
# test_cuda as is (its ops group checks cuda_gemv_tc_split directly; its attn group runs every
# decode case with the tensor-core walk against the CPU), quant + e2e groups with each opt-in;
# the attention op bench ("attn tc" against "attn auto"); then 8B / 1B bf16 decode at B=1, 4,
# 8, 32: as is, 3..8 rows on the streaming GEMV with hi + lo x, the tensor-core attention walk,
# and both. Short lines only. Carry .carry/devpack.tar.xz.
#   bash tools/diag/optin_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
SPLIT=MLXCEL_DENSE_GEMV_ROWS=2,MLXCEL_GEMV_TC_SPLIT_ROWS=8
diag_tests "$SPLIT" MLXCEL_ATTN_TC=1
grep -hE 'e2e .*differ' "$D"/test-MLXCEL_*.log | sort | uniq -c | sort -rn | head -8 | cut -c1-120
timeout 150 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn (auto|tc) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' |
  cut -c1-80
grep -E "FAIL" "$D/attn.log" | head -3
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- $SPLIT MLXCEL_ATTN_TC=1 $SPLIT,MLXCEL_ATTN_TC=1" \
  BATCH=1,4,8,32 REPEAT=2 timeout 300 bash tools/diag/bench_ab.sh |
  awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
