#!/usr/bin/env bash
# GPU machine, one call (~5 min): session 14's end state. test_cuda in full; 8B / 1B bf16
# decode at B=1 against the session's start (BIN=mlxcel-base, commit 733ec3f: the bf16 step
# must not move), median of 2, both orders; the synthetic 8B as MLX q4g64 / q8g64 at B=8
# and 32 (the one-row fusions do not apply there). Carry .carry/devpack.tar.xz
# (`BASE=733ec3f XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/final_s14.sh
set -u
. bench/device_env.sh
diag_init
diag_test -
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $(diag_base) - $(diag_base)" \
  diag_ab 150
echo "== bf16: $((SECONDS - T0)) s"
BATCH=8,32 REPEAT=1 QUANT="4:64 8:64" BF16=0 diag_quant 250 "^== done"
echo "== done: $((SECONDS - T0)) s"
