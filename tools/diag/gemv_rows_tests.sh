#!/usr/bin/env bash
# GPU machine: test_cuda with MLXCEL_DENSE_GEMV_ROWS=2 (3..8 decode rows on the streaming
# tensor-core GEMV, bf16 x) - every group; the failures and the e2e lines near them.
#   bash tools/diag/gemv_rows_tests.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
MLXCEL_DENSE_GEMV_ROWS=2 timeout 200 .carry/dev/test_cuda . > "$D/test-rows2.log" 2>&1
echo "== test all rows2: rc $? $(tail -1 "$D/test-rows2.log"), $((SECONDS - T0)) s"
grep -E '^FAIL' "$D/test-rows2.log" | head -8 | cut -c1-200
grep -E 'e2e .*differ' "$D/test-rows2.log" | head -20 | cut -c1-200
