#!/usr/bin/env bash
# GPU machine, one call: the session-10 defaults (qmv_i8 for 4-bit rows <= 8) checked and
# timed. test_cuda as is; the access-pattern probe (cuda_ops_bench --only stream); 8B q4g64
# decode at B=1 / 8 / 32 as is, with MLXCEL_QMV_I8_GLU=0 and with MLXCEL_QMV_I8=0; then where a q4 decode step's time
# goes (step_ncu.sh on the converted checkpoint). Short lines only.
#   bash tools/diag/i8_default_check.sh
set -u
. bench/device_env.sh
diag_init
timeout 200 .carry/dev/test_cuda . > "$D/test.log" 2>&1
echo "== test_cuda: rc $? $(tail -1 "$D/test.log"), $((SECONDS - T0)) s"
grep '^FAIL' "$D/test.log" | head -5 | cut -c1-160
timeout 120 .carry/dev/cuda_ops_bench --only stream > "$D/stream.log" 2>&1
echo "== stream probe: rc $?, $((SECONDS - T0)) s"
grep -E '^ +time stream' "$D/stream.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' | cut -c1-100
BATCH=${BATCH:-1,8,32} AB="- MLXCEL_QMV_I8_GLU=0 MLXCEL_QMV_I8=0" QUANT="4:64" BF16=0 REPEAT=2 \
  timeout 300 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$12}'
MODELS=/tmp/mlxcel-dev/llama-3.1-8b-q4g64 COUNT=1500 timeout 200 bash tools/diag/step_ncu.sh 2>&1 |
  head -30 | cut -c1-100
echo "== done: $((SECONDS - T0)) s"
