#!/usr/bin/env bash
# GPU machine: bf16 decode at 3..8 rows (dummy weights, prompt 512, gen 128) with the
# register-fed tensor-core GEMV on fp32 x (as is), the streaming one on bf16 x
# (MLXCEL_DENSE_GEMV_ROWS=2) and cuBLASLt (=0); then B=32 as is (the split policy). Short
# lines only. Carry .carry/devpack.tar.xz.
#   bash tools/diag/gemv_rows_check.sh
set -u
. bench/device_env.sh
diag_init
R=MLXCEL_DENSE_GEMV_ROWS
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- $R=2 $R=0" BATCH=4,8 REPEAT=2 \
  diag_ab 300
SHAPES=llama-3.1-8b BATCH=32 REPEAT=2 \
  diag_ab 100
echo "== done: $((SECONDS - T0)) s"
