#!/usr/bin/env bash
# GPU machine, one call (~8 min): the one-row qmv_i8 fusions with the RoPE + KV write in the
# q / k / v qmv's epilogue and 8-bit x as hi + lo (MLXCEL_QMV_I8_INPREP). test_cuda's quant +
# e2e groups as is and the quant group with it off; the synthetic 8B as MLX q4g64 and q8g64:
# decode quality against bf16 (compare --decode, on / off); q4 B=1 decode as is, against
# the build before (BIN=mlxcel-base) and with it off, interleaved (median of 3), and without
# the attention launch (MLXCEL_DIAG_SKIP=attn, the bound); q8 B=1 on / off. Carry
# .carry/devpack.tar.xz (`BASE=<commit> XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/qrope_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e
diag_test MLXCEL_QMV_I8_INPREP=0 quant
AB="- MLXCEL_QMV_I8_INPREP=0" QUANT="4:64 8:64" N=128 timeout 360 \
  bash tools/diag/decode_compare.sh | grep -E '^decode-compare|^== conv'
B=$(diag_base)
AB="- $B MLXCEL_QMV_I8_INPREP=0 - $B MLXCEL_QMV_I8_INPREP=0 MLXCEL_DIAG_SKIP=attn" BATCH=1 \
  REPEAT=3 QUANT="4:64" BF16=0 diag_quant 250
AB="- MLXCEL_QMV_I8_INPREP=0 - MLXCEL_QMV_I8_INPREP=0" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 \
  diag_quant 120
echo "== done: $((SECONDS - T0)) s"
