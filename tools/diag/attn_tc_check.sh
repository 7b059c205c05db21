#!/usr/bin/env bash
# GPU machine, one call: decode attention on the tensor cores (MLXCEL_ATTN_TC=1, q and P as
# bf16 hi + lo MMA rows). test_cuda as is (its attn group runs every decode case with the
# other walk too, against the CPU at 1e-4) and its quant + e2e groups with the walk on; the
# attention op bench (rows "attn tc" against "attn auto"); 8B / 1B bf16 decode at B=1, 8, 32
# as is and with it. Short lines only.
#   bash tools/diag/attn_tc_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
diag_tests MLXCEL_ATTN_TC=1
timeout 200 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn (auto|tc) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' | cut -c1-80
grep -E "FAIL" "$D/attn.log" | head -3
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_ATTN_TC=1" BATCH=1,8,32 REPEAT=2 \
  timeout 250 bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
