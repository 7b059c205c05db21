#!/usr/bin/env bash
# GPU machine: where a kernel's warps stall, per SASS instruction. Nsight Compute samples the
# warps of one launch of KERNEL (regex; SKIP launches skipped first) of the command given
# after the options, with source correlation (the build has -lineinfo); the report goes to
# $OUT/diag/KERNEL.ncu-rep (open it in the GUI) and the source page to .csv, summarised by
# tools/diag/ncu_source.py: the instructions holding most stall samples, with the reason.
#   KERNEL=qmv_mma_kernel SKIP=3 QMV_SHAPE=gate+up QMV_ROWS=1 QMV_BITS=4 \
#     bash tools/diag/ncu_source.sh .carry/dev/cuda_ops_bench --only qmv
set -u
. bench/device_env.sh
diag_init
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
k=${KERNEL:?KERNEL=regex}
rep="$D/${k//[^A-Za-z0-9_]/_}"
timeout "${NCU_TIMEOUT:-180}" "$NCU" --kernel-name "regex:$k" --launch-skip "${SKIP:-0}" \
  --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --import-source yes -f -o "$rep" "$@" > "$rep.log" 2>&1 || { tail -5 "$rep.log"; exit 1; }
"$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2> "$rep.err" ||
  { tail -3 "$rep.err"; exit 1; }
python3 tools/diag/ncu_source.py "$rep.csv" "${TOP:-25}"
