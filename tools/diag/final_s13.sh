#!/usr/bin/env bash
# GPU machine, one call (~7 min): session 13's end state. test_cuda in full; 8B / 1B bf16
# decode at B=1, 8, 32 (dummy weights); at B=1 also the build before the greedy kernel's
# change (BIN=mlxcel-base), one attention ring stage, PDL off; the synthetic 8B as MLX q4g64 /
# q8g64 at B=1, and q4 without its x-prep / attention / RoPE launches (MLXCEL_DIAG_SKIP: the
# bound for #6). Carry .carry/devpack.tar.xz (`BASE=<commit> XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/final_s13.sh
set -u
. bench/device_env.sh
diag_init
diag_tests
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1,8,32 REPEAT=2 diag_ab 150
echo "== bf16: $((SECONDS - T0)) s"
B=$(diag_base)
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="$B MLXCEL_ATTN_STAGES=1 \
MLXCEL_CUDA_PDL=0" diag_ab 100
echo "== bf16 B=1 A/B: $((SECONDS - T0)) s"
BATCH=1 REPEAT=2 QUANT="4:64 8:64" BF16=0 timeout 200 bash tools/diag/quant_b1.sh |
  awk '/^==/ {print; next} {print $1,$2,$3,$6,$12}'
BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 AB="MLXCEL_DIAG_SKIP=prep MLXCEL_DIAG_SKIP=attn \
MLXCEL_DIAG_SKIP=attn+prep+rope" timeout 100 bash tools/diag/quant_b1.sh |
  awk '/^== done/ {print; next} /^==/ {next} {print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
