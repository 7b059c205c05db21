#!/usr/bin/env bash
# GPU machine (session 19): the one-wave K-split rule on a shape it was not tuned on (Qwen3-8B:
# 36 layers, intermediate 12,288, q/k norms) and again on the two Llamas, against the previous
# gemv.cu linked beside (BIN=mlxcel-base), B=1, bf16 dummy weights. Carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
B=BIN=mlxcel-base
SHAPES="qwen3-8b llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $B - $B" diag_ab 300
echo "== end: $((SECONDS - T0)) s"
