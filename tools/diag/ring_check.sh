#!/usr/bin/env bash
# GPU machine, one call (~9 min): session 15's two changes. The fused one-row qmv_i8's
# weight ring (MLXCEL_QMV_RING: cp.async stages in shared memory, default 2) and decode
# attention's K / V copies before the PDL wait (prior_stable, no switch: against the build
# before, BIN=mlxcel-base). test_cuda's attn, quant and e2e groups; 8B / 1B bf16 B=1 (the
# attention change alone) against the base; the synthetic 8B as MLX q4g64 / q8g64 at B=1
# with the ring 2, 0, 3 and the base, interleaved. Carry .carry/devpack.tar.xz
# (`BASE=ef6b073 XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/ring_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - attn,quant,e2e
B=$(diag_base)
SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="- $B - $B" diag_ab 150
echo "== bf16: $((SECONDS - T0)) s"
AB="- MLXCEL_QMV_RING=0 MLXCEL_QMV_RING=3 $B - MLXCEL_QMV_RING=0 $B" BATCH=1 REPEAT=2 \
  QUANT="4:64" BF16=0 diag_quant 230 "^== conv"
AB="- MLXCEL_QMV_RING=0 $B" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 diag_quant 150 "^== conv"
echo "== done: $((SECONDS - T0)) s"
