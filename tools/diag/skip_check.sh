#!/usr/bin/env bash
# GPU machine, one call (~2 min): what each small decode kernel costs on the B=1 step's
# critical path, in the graph with PDL as it runs: 8B / 1B bf16 decode with each of them not
# launched (MLXCEL_DIAG_SKIP; the outputs are wrong, the time is what it measures).
# Carry .carry/devpack.tar.xz.
#   bash tools/diag/skip_check.sh
set -u
. bench/device_env.sh
diag_init
K=MLXCEL_DIAG_SKIP
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $K=attn $K=norm $K=glu $K=rope $K=attn+norm+glu+rope" diag_ab 200
echo "== done: $((SECONDS - T0)) s"
