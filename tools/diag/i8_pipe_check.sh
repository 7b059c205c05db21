#!/usr/bin/env bash
# GPU machine, one call: qmv_i8's 4-bit half-batch pipeline (MLXCEL_QMV_I8_PIPE). test_cuda
# as is (its direct qmv_i8 cases run both ways); quant and e2e groups with the pipeline on;
# the qmv op bench (qmv_i8 against qmv_i8p rows); 8B q4g64 decode at B=1 / 8 as is and with
# MLXCEL_QMV_I8_PIPE=1. Short lines only.
#   bash tools/diag/i8_pipe_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
for e in - MLXCEL_QMV_I8_PIPE=1; do
  n=${e%%=*}; g=""; [ "$e" != - ] && g=TEST_CUDA_ONLY=quant,e2e
  env $(ab_env $e) $g timeout 200 .carry/dev/test_cuda . > "$D/test-$n.log" 2>&1
  echo "== test ${g:-all} $e: rc $? $(tail -1 "$D/test-$n.log"), $((SECONDS - T0)) s"
  grep '^FAIL' "$D/test-$n.log" | head -5 | cut -c1-160
done
timeout 200 .carry/dev/cuda_ops_bench --only qmv > "$D/qmv.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E '^ +time qmv_i8|FAIL' "$D/qmv.log" |
  sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g; s/ GB.s.*//' | cut -c1-90
BATCH=${BATCH:-1,8} AB="- MLXCEL_QMV_I8_PIPE=1" QUANT="4:64" BF16=0 REPEAT=2 \
  timeout 300 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
