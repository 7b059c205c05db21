#!/usr/bin/env bash
# GPU machine, one call (~3 min): where the one-row q4 step's time goes. The synthetic 8B as
# MLX q4g64 at B=1, as is and without each layer launch in turn (MLXCEL_DIAG_SKIP: q/k/v, o,
# gate/up, down qmvs with their fused epilogues, attention; outputs wrong, timing only),
# median of 2. Carry .carry/devpack.tar.xz.
#   bash tools/diag/skip_q_check.sh
set -u
. bench/device_env.sh
diag_init
AB="- MLXCEL_DIAG_SKIP=qkv MLXCEL_DIAG_SKIP=o MLXCEL_DIAG_SKIP=gu MLXCEL_DIAG_SKIP=down \
MLXCEL_DIAG_SKIP=attn" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 200 "^== conv"
echo "== done: $((SECONDS - T0)) s"
