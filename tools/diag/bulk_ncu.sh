#!/usr/bin/env bash
# GPU machine (~2 min): Nsight Compute on the op bench's qmv_bulk at QMV_ROWS (default 32),
# QMV_SHAPE (default o), 4-bit: the MLX-layout launch (TL false) against the tiled one (TL
# true), duration, occupancy, issue and the warp stall reasons side by side.
#   bash tools/diag/bulk_ncu.sh
set -u
. bench/device_env.sh
diag_init
for tl in 0 1; do
  QMV_SHAPE=${QMV_SHAPE:-o} QMV_ROWS=${QMV_ROWS:-32} QMV_BITS=4 timeout 150 "$NCU" \
    --kernel-name-base demangled -k "regex:qmv_bulk_kernel<\(int\)4, \(int\)4, \(int\)1, \(int\)8, \(bool\)$tl>" --launch-count 1 \
    --launch-skip 3 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SchedulerStats --section MemoryWorkloadAnalysis \
    .carry/dev/cuda_ops_bench --only qmv > "$D/ncu-$tl.log" 2>&1
  echo "== TL $tl: rc $? $((SECONDS - T0)) s"
  grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Issued Warp|Eligible|Stall|Warp Cycles Per Issued|Memory Throughput|L1/TEX Hit|L2 Hit|Bank" \
    "$D/ncu-$tl.log" | sed -E 's/ +/ /g' | head -40
done
echo "== done: $((SECONDS - T0)) s"
