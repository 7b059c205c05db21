#!/usr/bin/env bash
# GPU machine, one call (~5 min): the defaults as they are at the end of a session. 8B / 1B
# bf16 decode at B=1, 8, 32 (dummy weights), then the synthetic 8B converted to MLX q4g64 and
# q8g64 at B=1 (tools/diag/quant_b1.sh). Carry .carry/devpack.tar.xz.
#   bash tools/diag/final_check.sh
set -u
. bench/device_env.sh
diag_init
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1,8,32 REPEAT=2 diag_ab 150
echo "== bf16: $((SECONDS - T0)) s"
BATCH=1 REPEAT=3 QUANT="4:64 8:64" BF16=0 timeout 300 bash tools/diag/quant_b1.sh |
  awk '/^==/ {print; next} {print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
