#!/usr/bin/env bash
# GPU machine (session 19): B=1 bf16 decode with the one-row GEMV's K split forced
# (MLXCEL_GEMV_KSPLIT=1/2/4, every launch) against the tuned rule. Carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
K=MLXCEL_GEMV_KSPLIT
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $K=1 $K=2 $K=4 - $K=1 $K=2" diag_ab 300
echo "== done: $((SECONDS - T0)) s"
