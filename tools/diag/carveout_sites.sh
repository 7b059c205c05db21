#!/usr/bin/env bash
# GPU machine (session 19): B=1 decode with preferred carveouts on some launch sites only
# (MLXCEL_DIAG_CARVEOUT_SITES bits: 1 attention, 2 GEMV with the norm, 4 other GEMVs, 8 qmv_i8
# with epilogues / in-CTA prep, 16 other qmv_i8; MLXCEL_DIAG_CARVEOUT_PCT).
# Carry .carry/devpack.tar.xz.   bash tools/diag/carveout_sites.sh
set -u
. bench/device_env.sh
diag_init
s() { echo "MLXCEL_DIAG_CARVEOUT_SITES=$1,MLXCEL_DIAG_CARVEOUT_PCT=$2"; }
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $(s 3 58) $(s 7 58) $(s 1 58) $(s 3 44) $(s 7 44) - $(s 3 58) $(s 7 58)" diag_ab 300 |
  sed 's/MLXCEL_DIAG_CARVEOUT_SITES=/S/; s/,MLXCEL_DIAG_CARVEOUT_PCT=/@/'
echo "== bf16: $((SECONDS - T0)) s"
AB="- $(s 9 58) $(s 25 58) $(s 25 44) - $(s 9 58) $(s 25 58)" BATCH=1 REPEAT=2 QUANT="4:64" \
  BF16=0 diag_quant 240 "^== conv" | sed 's/MLXCEL_DIAG_CARVEOUT_SITES=/S/; s/,MLXCEL_DIAG_CARVEOUT_PCT=/@/'
echo "== end: $((SECONDS - T0)) s"
