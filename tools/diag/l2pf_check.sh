#!/usr/bin/env bash
# GPU machine, one call (~3 min): the next-matmul L2 prefetch by the small kernels
# (MLXCEL_L2_PREFETCH_MB): test_cuda's e2e + attn groups with it on, then 8B / 1B bf16 decode
# at B=1 (and B=8) for several budgets. Carry .carry/devpack.tar.xz.
#   bash tools/diag/l2pf_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
P=MLXCEL_L2_PREFETCH_MB
MLXCEL_L2_PREFETCH_MB=16 TEST_CUDA_ONLY=e2e,attn,quant timeout 200 .carry/dev/test_cuda . \
  > "$D/test-l2pf.log" 2>&1
echo "== test e2e,attn,quant $P=16: rc $? $(tail -1 "$D/test-l2pf.log"), $((SECONDS - T0)) s"
grep '^FAIL' "$D/test-l2pf.log" | head -5 | cut -c1-160
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=3 \
  AB="- $P=4 $P=8 $P=16 $P=32 $P=64 -" timeout 300 bash tools/diag/bench_ab.sh |
  awk '{print $1,$2,$3,$6,$12}'
SHAPES="llama-3.1-8b" BATCH=8 REPEAT=2 AB="- $P=16" timeout 100 bash tools/diag/bench_ab.sh |
  awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
