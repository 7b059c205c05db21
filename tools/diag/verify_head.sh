#!/usr/bin/env bash
# GPU machine (~6-7 min): the packed build's test_cuda in full, then B=1 decode of the synthetic
# 8B as bf16, MLX q4g64 and q8g64 (prompt 512, gen 128, two runs each, interleaved as listed):
# a session's check that the CUDA path still holds after host-side changes made without a GPU.
# Pack first: XZ=1 bash bench/pack_device.sh; carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
diag_test -
AB="- -" BATCH=${BATCH:-1} REPEAT=2 QUANT="4:64 8:64" BF16=1 diag_quant 420 "^== conv"
echo "== end: $((SECONDS - T0)) s"
