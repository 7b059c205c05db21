#!/usr/bin/env bash
# GPU machine (session 19): decode attention's first KV chunks copied before the PDL wait
# (MLXCEL_ATTN_EARLY_KV, kv_settled): tests, the attn_timeline harness with the engine's
# q/k/v GEMV as producer (SETTLED=0/1), and B=1 decode A/B (8B / 1B bf16, 8B q4g64).
# Carry .carry/devpack.tar.xz and .carry/tl.tar.xz.   bash tools/diag/early_kv_check.sh
set -u
. bench/device_env.sh
diag_init
tar xJf .carry/tl.tar.xz -C .carry
diag_test - attn,e2e
for e in "SETTLED=0" "SETTLED=1" "SETTLED=0 CARVEOUT=58" "SETTLED=1 CARVEOUT=58"; do
  echo "== PROD_GEMV=1 $e"
  env PROD_GEMV=1 $e timeout 60 .carry/tl/attn_tl_n 20 | sed 's/^/  /'
  env PROD_GEMV=1 $e timeout 60 .carry/tl/attn_tl_t 5 | grep -v "^stand-ins\|^with att"
done
K=MLXCEL_ATTN_EARLY_KV=0
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $K - $K - $K" diag_ab 300
echo "== bf16: $((SECONDS - T0)) s"
AB="- $K - $K" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 240 "^== conv"
echo "== end: $((SECONDS - T0)) s"
