#!/usr/bin/env bash
# GPU machine, one call (~2.5 min): the norm fused into the GEMV (MLXCEL_GEMV_FUSE, with RoPE:
# MLXCEL_GEMV_ROPE) against the small kernels skipped outright (MLXCEL_DIAG_SKIP: the bound a
# fusion can reach), new build and the build before (BIN=mlxcel-base). test_cuda's ops + e2e
# groups with the fusions on first. Carry .carry/devpack.tar.xz.
#   bash tools/diag/fuse_check.sh
set -u
. bench/device_env.sh
diag_init
T0=$SECONDS
F=MLXCEL_GEMV_FUSE=1,MLXCEL_GEMV_ROPE=1
env MLXCEL_GEMV_FUSE=1 MLXCEL_GEMV_ROPE=1 TEST_CUDA_ONLY=ops,e2e timeout 100 \
  .carry/dev/test_cuda . > "$D/test-fuse.log" 2>&1
echo "== test ops,e2e $F: rc $? $(tail -1 "$D/test-fuse.log"), $((SECONDS - T0)) s"
grep '^FAIL' "$D/test-fuse.log" | head -5 | cut -c1-160
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $F $F,BIN=mlxcel-base MLXCEL_GEMV_FUSE=1 MLXCEL_DIAG_SKIP=norm+glu+rope \
MLXCEL_GEMV_KSPLIT=1" timeout 150 bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
