#!/usr/bin/env bash
# GPU machine (session 19): where the 8B bf16 B=1 step's time goes now: each launch kind left
# out (MLXCEL_DIAG_SKIP; outputs wrong, timing only), and one empty launch added after each
# attention (MLXCEL_DIAG_EMPTY=1: what a boundary costs). Carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
K=MLXCEL_DIAG_SKIP
SHAPES="llama-3.1-8b" BATCH=1 REPEAT=2 \
  AB="- $K=attn $K=qkv $K=o $K=gu $K=down MLXCEL_DIAG_EMPTY=1 MLXCEL_DIAG_EMPTY=4 -" diag_ab 200
echo "== done: $((SECONDS - T0)) s"
