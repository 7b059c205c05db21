#!/usr/bin/env bash
# GPU machine, one call: 3..8 decode rows on the streaming tensor-core GEMV with x as bf16
# hi + lo (the default since session 11). test_cuda as is (every group); then 8B / 1B bf16
# decode at B=4 / 8 as is, with bf16 x (MLXCEL_GEMV_TC_SPLIT_ROWS=0) and with the old
# register-fed fp32-x kernel (MLXCEL_DENSE_GEMV_ROWS=8); 8B B=1 as is. Short lines only.
#   bash tools/diag/gemv_split_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
diag_tests
grep -E 'e2e .*differ' "$D/test--.log" | head -12 | cut -c1-120
SHAPES="llama-3.1-8b" AB="- MLXCEL_GEMV_TC_SPLIT_ROWS=0 MLXCEL_DENSE_GEMV_ROWS=8" BATCH=4,8 \
  REPEAT=2 timeout 150 bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'
SHAPES="llama-3.2-1b" AB="- MLXCEL_DENSE_GEMV_ROWS=8" BATCH=8 \
  REPEAT=2 timeout 100 bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'
SHAPES="llama-3.1-8b" BATCH=1 REPEAT=2 timeout 60 bash tools/diag/bench_ab.sh |
  awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
