#!/usr/bin/env bash
# GPU machine, one call: 3..8 decode rows on the streaming tensor-core GEMV with x as bf16
# hi + lo (MLXCEL_DENSE_GEMV_ROWS=2 MLXCEL_GEMV_TC_SPLIT_ROWS=8, opt-in until measured).
# test_cuda as is (every group; the ops group checks cuda_gemv_tc_split directly), its quant
# and e2e groups with the split path on; then 8B / 1B bf16 decode at B=4 / 8 as is (the
# register-fed fp32-x kernel), with bf16 x (MLXCEL_DENSE_GEMV_ROWS=2) and with hi + lo x.
# Short lines only.
#   bash tools/diag/gemv_split_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
SPLIT=MLXCEL_DENSE_GEMV_ROWS=2,MLXCEL_GEMV_TC_SPLIT_ROWS=8
diag_tests "$SPLIT"
grep -E 'e2e .*differ' "$D/test-MLXCEL_DENSE_GEMV_ROWS.log" | head -12 | cut -c1-120
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_DENSE_GEMV_ROWS=2 $SPLIT" BATCH=4,8 \
  REPEAT=2 timeout 200 bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
