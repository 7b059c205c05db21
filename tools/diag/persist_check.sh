#!/usr/bin/env bash
# GPU machine, one call (~4 min): the persistent 1..2-row GEMV (MLXCEL_GEMV_PERSIST=1: one
# wave of CTAs walking the row tiles, x staged and normalised once a CTA). test_cuda's ops
# group (its persistent cases force 7 CTAs) and e2e with it on; the op bench's K-split sweep
# (a "gemv persist" line a shape); 8B / 1B B=1 and 8B B=2: as is, persistent, and the build
# before the kernel's tile loop (BIN=mlxcel-base: `BASE=<commit> XZ=1 bash
# bench/pack_device.sh`). Carry .carry/devpack.tar.xz.
#   bash tools/diag/persist_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test MLXCEL_GEMV_PERSIST=1 ops,e2e
timeout 150 .carry/dev/cuda_ops_bench --only gemvks > "$D/gemvks.log" 2>&1
echo "== op bench gemvks: rc $? $((SECONDS - T0)) s"
grep -E "^ *gemv (ks=auto|ks=2|persist)" "$D/gemvks.log" | sed -E 's/ +/ /g' | cut -c1-110
B=$(diag_base)
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- MLXCEL_GEMV_PERSIST=1 $B" \
  diag_ab 150
SHAPES=llama-3.1-8b BATCH=2 REPEAT=2 AB="- MLXCEL_GEMV_PERSIST=1" diag_ab 60
echo "== done: $((SECONDS - T0)) s"
