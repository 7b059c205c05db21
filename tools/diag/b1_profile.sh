#!/usr/bin/env bash
# GPU machine, one call (~4 min): where a B=1 bf16 decode step goes now. Per-kernel time of a
# step (step_ncu.sh) for the 8B and 1B shapes with the defaults, then Nsight Compute's
# per-instruction stall samples of one decode attention launch of the 8B shape (ncu_source.sh;
# the ~9 us a layer that is not bandwidth). Carry .carry/devpack.tar.xz.
#   bash tools/diag/b1_profile.sh
set -u
. bench/device_env.sh
diag_init
SHAPES="llama-3.1-8b llama-3.2-1b" COUNT=${COUNT:-900} timeout 330 bash tools/diag/step_ncu.sh
echo "== steps: $((SECONDS - T0)) s"
C=$(dummy_config llama-3.1-8b)
KERNEL=paged_attn SKIP=${SKIP:-400} TOP=${TOP:-22} NCU_TIMEOUT=120 \
  bash tools/diag/ncu_source.sh .carry/dev/mlxcel generate -m "$C" --load-format dummy \
  --device cuda --prompt-ids "$(seq -s, 1 512)" --ignore-eos -n 32 | cut -c1-150
"$NCU" -i "$D/paged_attn.ncu-rep" --page details --section SpeedOfLight \
  --section WarpStateStats 2>/dev/null | grep -E "Duration|Throughput|Stall|Issued|Active|Elapsed" |
  head -24
echo "== done: $((SECONDS - T0)) s"
