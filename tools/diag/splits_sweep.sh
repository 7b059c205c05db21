#!/usr/bin/env bash
# GPU machine: 8B bf16 decode (dummy weights, prompt 512, gen 128) at B=32, 16 and 8 with the
# built-in decode split count and forced ones (MLXCEL_PAGED_DECODE_SPLITS), to check the
# policy (tune_cuda_default_splits). Short lines only. Carry .carry/devpack.tar.xz.
#   bash tools/diag/splits_sweep.sh
set -u
. bench/device_env.sh
diag_init
P=MLXCEL_PAGED_DECODE_SPLITS
SHAPES=llama-3.1-8b AB="- $P=1" BATCH=32 REPEAT=2 \
  diag_ab 150
SHAPES=llama-3.1-8b AB="- $P=2 $P=4" BATCH=16 REPEAT=2 \
  diag_ab 150
SHAPES=llama-3.1-8b AB="- $P=4" BATCH=8 REPEAT=2 \
  diag_ab 150
echo "== done: $((SECONDS - T0)) s"
