#!/usr/bin/env bash
# GPU machine, one call (~6 min): test_cuda in full (after the persistent-GEMV removal and the
# rope_targets merge); what one kernel boundary costs the B=1 step (MLXCEL_DIAG_EMPTY=N empty
# PDL launches after each layer's attention) on 8B / 1B bf16 and the synthetic 8B as MLX
# q4g64, against the build before (BIN=mlxcel-base: must not move), interleaved. Carry
# .carry/devpack.tar.xz (`BASE=ef6b073 XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/boundary_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test -
B=$(diag_base)
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 \
  AB="- $B MLXCEL_DIAG_EMPTY=1 MLXCEL_DIAG_EMPTY=2 - $B" diag_ab 200
echo "== bf16: $((SECONDS - T0)) s"
AB="- $B MLXCEL_DIAG_EMPTY=1 MLXCEL_DIAG_EMPTY=2 - $B" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 \
  diag_quant 230 "^== conv"
echo "== done: $((SECONDS - T0)) s"
