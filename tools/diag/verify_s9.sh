#!/usr/bin/env bash
# one-off (session 9): default-path tests, RoPE/fuse tests, bf16 A/B, q4 A/B
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
T=.carry/dev/test_cuda
timeout 200 $T . > $D/t-all.log 2>&1; echo "== all: rc $? $(tail -1 $D/t-all.log) $((SECONDS-T0)) s"
grep '^FAIL' $D/t-all.log | head -5 | cut -c1-150
TEST_CUDA_ONLY=ops,e2e MLXCEL_GEMV_ROPE=1 timeout 120 $T . > $D/t-rope.log 2>&1; echo "== rope: rc $? $(tail -1 $D/t-rope.log) $((SECONDS-T0)) s"
grep '^FAIL' $D/t-rope.log | head -5 | cut -c1-150
TEST_CUDA_ONLY=ops,e2e MLXCEL_GEMV_ROPE=1 MLXCEL_GEMV_FUSE=1 timeout 120 $T . > $D/t-rf.log 2>&1; echo "== rope+fuse: rc $? $(tail -1 $D/t-rf.log) $((SECONDS-T0)) s"
grep '^FAIL' $D/t-rf.log | head -5 | cut -c1-150
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_GEMV_ROPE=1 MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1 MLXCEL_CUDA_PDL=0" BATCH=1 REPEAT=2 timeout 220 bash tools/diag/bench_ab.sh 2>&1 | tee $D/ab.log | awk '{print $1,$2,$3,$6,$7}'
echo "== ab: $((SECONDS-T0)) s"
BATCH=1,8 AB="- MLXCEL_QMV_MMA=8" QUANT="4:64" BF16=0 REPEAT=2 timeout $((590-SECONDS+T0)) bash tools/diag/quant_b1.sh 2>&1 | tee $D/q.log | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$7}'
