#!/usr/bin/env bash
# GPU machine, one call (~2.5 min): the 1..2-row GEMV loading its epilogue's residual / RoPE
# cos, sin and KV slot before the main loop (not after the sums). test_cuda in full, then
# 8B / 1B B=1 as is against the build before (BIN=mlxcel-base: `BASE=<commit> XZ=1 bash
# bench/pack_device.sh`), median of 3, both orders. Carry .carry/devpack.tar.xz.
#   bash tools/diag/epi_pre_check.sh
set -u
. bench/device_env.sh
diag_init
diag_tests
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=3 \
  AB="- BIN=mlxcel-base - BIN=mlxcel-base" diag_ab 200
echo "== done: $((SECONDS - T0)) s"
