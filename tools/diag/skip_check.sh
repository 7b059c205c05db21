#!/usr/bin/env bash
# GPU machine, one call (~2 min): what each decode launch costs on the B=1 step's critical
# path, in the graph with PDL as it runs: bf16 decode with each kind in SKIPS not launched
# (MLXCEL_DIAG_SKIP; the outputs are wrong, the time is what it measures), then with each
# count in EMPTY of empty launches after every attention (MLXCEL_DIAG_EMPTY: what a boundary
# costs). Carry .carry/devpack.tar.xz.
#   bash tools/diag/skip_check.sh
#   SHAPES=llama-3.1-8b SKIPS="attn qkv o gu down" EMPTY="1 4" bash tools/diag/skip_check.sh
#     (session 19's per-launch table)
set -u
. bench/device_env.sh
diag_init
ab="-"
for s in ${SKIPS-attn norm glu rope attn+norm+glu+rope}; do ab="$ab MLXCEL_DIAG_SKIP=$s"; done
for n in ${EMPTY-}; do ab="$ab MLXCEL_DIAG_EMPTY=$n"; done
SHAPES=${SHAPES:-"llama-3.1-8b llama-3.2-1b"} BATCH=1 REPEAT=2 AB="$ab -" diag_ab 200
echo "== done: $((SECONDS - T0)) s"
