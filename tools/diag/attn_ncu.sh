#!/usr/bin/env bash
# GPU machine, one call (~3 min): Nsight Compute's per-instruction stall samples of one B=1
# decode attention launch of the 8B shape (dummy weights, 512-token prompt) and its duration,
# issue and warp-state summary: where the ~6 us of attention's own chain go (a kernel
# boundary alone costs ~1.5 us, MLXCEL_DIAG_EMPTY). Carry .carry/devpack.tar.xz.
#   bash tools/diag/attn_ncu.sh
set -u
. bench/device_env.sh
diag_init
C=$(dummy_config llama-3.1-8b)
KERNEL=paged_attn SKIP=${SKIP:-400} TOP=${TOP:-40} NCU_TIMEOUT=150 \
  bash tools/diag/ncu_source.sh .carry/dev/mlxcel generate -m "$C" --load-format dummy \
  --device cuda --prompt-ids "$(seq -s, 1 512)" --ignore-eos -n 32 | cut -c1-170
"$NCU" -i "$D/paged_attn.ncu-rep" --page details --section SpeedOfLight \
  --section WarpStateStats --section LaunchStats 2>/dev/null |
  grep -E "Duration|Elapsed Cycles|Issued|Stall|Grid Size|Block Size|Registers|Warp Cycles" |
  head -30
echo "== done: $((SECONDS - T0)) s"
