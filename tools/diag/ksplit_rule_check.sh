#!/usr/bin/env bash
# GPU machine (session 19): the one-row GEMV's K-split rule "one wave" (gemv.cu) against the
# previous rule (BIN=mlxcel-base: the old gemv.cu linked beside): test_cuda in full, then
# 8B / 1B bf16 decode at B=1 (two rounds) and B=2. Carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
diag_test -
B=BIN=mlxcel-base
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $B - $B" diag_ab 300
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=2 REPEAT=2 AB="- $B" diag_ab 200
echo "== end: $((SECONDS - T0)) s"
