#!/usr/bin/env bash
# GPU machine: the tensor-core qmv (qmv_mma.cu) checked and timed in one call: the quant
# group of test_cuda with MLXCEL_QMV_MMA=8 and as is, then the 4-bit op bench (qmv_mma
# against the CUDA-core qmv and the streaming one, 8B shapes, 1 / 8 / 32 rows). Short lines.
#   bash tools/diag/qmv_mma_check.sh
set -u
. bench/device_env.sh
diag_init
for e in MLXCEL_QMV_MMA=8 -; do
  env $(ab_env $e) TEST_CUDA_ONLY=quant timeout 150 .carry/dev/test_cuda . \
    > "$D/test-${e%%=*}.log" 2>&1
  echo "== test quant $e: rc $? $(grep -c '^FAIL' "$D/test-${e%%=*}.log") FAIL, $((SECONDS - T0)) s"
  grep '^FAIL' "$D/test-${e%%=*}.log" | head -5 | cut -c1-160
  tail -1 "$D/test-${e%%=*}.log" | cut -c1-160
done
QMV_BITS=4 timeout 240 .carry/dev/cuda_ops_bench --only qmv > "$D/qmv.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E '^ +time (qmv_mma|old qmv|qmv_bulk0)|FAIL|qmv_mma vs' "$D/qmv.log" |
  sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' | cut -c1-110
