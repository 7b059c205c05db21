#!/usr/bin/env bash
# GPU machine, one call: the int8-activation qmv (qmv_i8.cu) checked and timed. test_cuda as
# is, its quant and e2e groups with MLXCEL_QMV_I8=8; the 4-bit op bench (qmv_i8 against
# qmv_mma, the CUDA-core and the streaming qmv, 8B shapes, 1 / 8 / 32 rows, 4- and 8-bit);
# 8B q4g64 and q8g64 decode at B=1 and 8 with MLXCEL_QMV_I8 off / 1 / 8; then `mlxcel
# compare` of those checkpoints against their bf16 source as is and with MLXCEL_QMV_I8=8
# (top-1, KL). Short lines only.
#   bash tools/diag/qmv_i8_check.sh
set -u
. bench/device_env.sh
diag_init
# every group as is (the session-9 refactors touched embed / gather and the K-split sum),
# quant + e2e with the int8 qmv
diag_tests MLXCEL_QMV_I8=8
diag_qmv_bench '^ +time (qmv_i8|qmv_mma16|old qmv|qmv_bulk0)|FAIL|qmv_i8 vs'
BATCH=1,8 AB="- MLXCEL_QMV_I8=1 MLXCEL_QMV_I8=8" QUANT="4:64 8:64" BF16=0 REPEAT=2 \
  timeout 330 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$12}'
W=/tmp/mlxcel-dev; S=$W/llama-3.1-8b
ids=$(python3 -c "import random; r=random.Random(7)
print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
for q in q4g64 q8g64; do
  for e in - MLXCEL_QMV_I8=8; do
    env $(ab_env $e) timeout 90 .carry/dev/mlxcel compare -m "$S-$q" --ref "$S" \
      --prompt-ids "$ids" -n 256 --device cuda --json 2> /dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin)
print('compare $q $e', j['top1_agreement_pct'], j['kl_mean'])"
  done
done
echo "== done: $((SECONDS - T0)) s"
