#!/usr/bin/env bash
# GPU machine (session 19): B=1 decode under uniform preferred shared-memory carveouts
# (MLXCEL_CUDA_CARVEOUT on every pdl_launch_config launch), 8B / 1B bf16 and 8B q4g64.
# Carry .carry/devpack.tar.xz.   bash tools/diag/carveout_check.sh
set -u
. bench/device_env.sh
diag_init
C=MLXCEL_CUDA_CARVEOUT
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $C=44 $C=25 $C=58 $C=100 $C=0 - $C=44 $C=25" diag_ab 300
echo "== bf16: $((SECONDS - T0)) s"
AB="- $C=44 $C=25 - $C=44 $C=25" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 240 "^== conv"
echo "== end: $((SECONDS - T0)) s"
