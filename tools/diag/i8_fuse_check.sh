#!/usr/bin/env bash
# GPU machine, one call: the RMSNorm and GLU computed by qmv_i8's prep kernel
# (MLXCEL_QMV_I8_NORM / _GLU). test_cuda as is; its quant and e2e groups with both off; 8B
# q4g64 decode at B=1 / 8 as is, without the norm fusion and without both; 8B bf16 (dummy
# weights) at B=1 as a check that holding the norm costs the bf16 path nothing. Short lines.
#   bash tools/diag/i8_fuse_check.sh
set -u
. bench/device_env.sh
diag_init
diag_tests MLXCEL_QMV_I8_NORM=0,MLXCEL_QMV_I8_GLU=0
BATCH=1,8 AB="- MLXCEL_QMV_I8_NORM=0 MLXCEL_QMV_I8_NORM=0,MLXCEL_QMV_I8_GLU=0" QUANT="4:64" \
  BF16=0 REPEAT=2 timeout 280 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" |
  awk '{print $1,$2,$3,$6,$12}'
AB="- MLXCEL_QMV_I8_NORM=0" BATCH=1 REPEAT=2 timeout 120 bash tools/diag/bench_ab.sh 2>&1 |
  awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
