#!/usr/bin/env bash
# GPU machine, one call (~4 min): the in-CTA norm's weight pieces loaded before the PDL wait
# (qmv_i8, one row). test_cuda's quant group; the synthetic 8B as MLX q4g64 and q8g64 at B=1,
# as is against the build before (BIN=mlxcel-base), interleaved (q4 median of 3, q8 of 2).
# Carry .carry/devpack.tar.xz (`BASE=<commit> XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/nw_early_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant
B=$(diag_base)
AB="- $B - $B" BATCH=1 REPEAT=3 QUANT="4:64" BF16=0 diag_quant 250 "^== conv"
AB="- $B - $B" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 diag_quant 150
echo "== done: $((SECONDS - T0)) s"
