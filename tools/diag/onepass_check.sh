#!/usr/bin/env bash
# GPU machine, one call (~6 min): the one-row in-CTA norm prep in one pass over x (session 18:
# g = x (w + offset) rounded as it is read, the groups' scales finished once rms(x) is known,
# instead of a sum-of-squares pass, then the rounding pass). test_cuda's quant + e2e groups;
# qi_timeline's layer, the build before (.carry/tl/qi_base) against now (qi_notl), interleaved,
# and one stamped run; the synthetic 8B as MLX q4g64 / q8g64 at B=1 against the build before
# (BIN=mlxcel-base). Carry .carry/devpack.tar.xz (with dev/mlxcel-base) and .carry/tl.
#   bash tools/diag/onepass_check.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e
for i in 1 2 3; do
  for b in qi_base qi_notl; do
    echo "$b $(timeout 60 .carry/tl/$b 30 2>&1 | cut -c1-100)"
  done
done
timeout 60 .carry/tl/qi_tl 30 > "$D/qi_tl.log" 2>&1
grep -E "^(==|  (waited|pro|b0|written|end))" "$D/qi_tl.log" | cut -c1-110
AB="- BIN=mlxcel-base - BIN=mlxcel-base - BIN=mlxcel-base" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 \
  diag_quant 330 "^== conv"
AB="- BIN=mlxcel-base - BIN=mlxcel-base" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 diag_quant 170
echo "== done: $((SECONDS - T0)) s"
