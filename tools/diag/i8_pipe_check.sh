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
diag_tests MLXCEL_QMV_I8_PIPE=1
diag_qmv_bench '^ +time qmv_i8|FAIL'
BATCH=${BATCH:-1,8} AB="- MLXCEL_QMV_I8_PIPE=1" QUANT="4:64" BF16=0 REPEAT=2 \
  timeout 300 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
