#!/usr/bin/env bash
# GPU machine, one call (session 9): test_cuda on the defaults, the ops + e2e groups with
# MLXCEL_GEMV_ROPE=1 and with ROPE + FUSE, the bf16 B=1 A/Bs on dummy 8B / 1B weights
# (bench_ab.sh), then the 8B q4g64 A/B of MLXCEL_QMV_MMA (quant_b1.sh). Short lines only.
set -u
. bench/device_env.sh
diag_init
T=.carry/dev/test_cuda
tests() { # name, environment...
  local n=$1; shift
  env "$@" timeout 200 $T . > "$D/t-$n.log" 2>&1
  echo "== $n: rc $? $(tail -1 "$D/t-$n.log") $((SECONDS - T0)) s"
  grep '^FAIL' "$D/t-$n.log" | head -5 | cut -c1-150
}
tests all
tests rope TEST_CUDA_ONLY=ops,e2e MLXCEL_GEMV_ROPE=1
tests rf TEST_CUDA_ONLY=ops,e2e MLXCEL_GEMV_ROPE=1 MLXCEL_GEMV_FUSE=1
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- MLXCEL_GEMV_ROPE=1 MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1 MLXCEL_CUDA_PDL=0" \
  timeout 220 bash tools/diag/bench_ab.sh 2>&1 | tee "$D/ab.log" | awk '{print $1,$2,$3,$6,$7}'
echo "== ab: $((SECONDS - T0)) s"
BATCH=1,8 AB="- MLXCEL_QMV_MMA=8" QUANT="4:64" BF16=0 REPEAT=2 \
  timeout $((590 - SECONDS + T0)) bash tools/diag/quant_b1.sh 2>&1 | tee "$D/q.log" |
  grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$7}'
