#!/usr/bin/env bash
# GPU machine, one call (~3 min): session 15's last commit as is: test_cuda's attn, quant and
# e2e groups, then the synthetic 8B as MLX q4g64 and q8g64 at B=1 (median of 2). Carry
# .carry/devpack.tar.xz (`XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/end_s15.sh
set -u
. bench/device_env.sh
diag_init
diag_test - attn,quant,e2e
AB="-" BATCH=1 REPEAT=2 QUANT="4:64 8:64" BF16=0 diag_quant 190 "^== conv"
echo "== done: $((SECONDS - T0)) s"
