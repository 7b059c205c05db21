#!/usr/bin/env bash
# GPU machine (~1 min): Nsight Compute on the op bench's one-row qmv_i8 with x rounded in the
# CTAs (the engine's B=1 form) on the tiled layout, QMV_SHAPE (default gate+up), 4-bit g64:
# duration, DRAM throughput, issue, and the per-issue stall reasons (largest first).
#   bash tools/diag/i8_ncu.sh
set -u
. bench/device_env.sh
diag_init
QMV_SHAPE=${QMV_SHAPE:-gate+up} QMV_ROWS=1 QMV_BITS=4 timeout 150 "$NCU" \
  --kernel-name-base demangled \
  -k "regex:qmv_i8_kernel<\(int\)4, \(int\)64, \(int\)[0-9], \(int\)1, \(int\)1, \(bool\)1>" \
  --launch-count 1 --launch-skip 3 --section SpeedOfLight --section Occupancy \
  --section SchedulerStats --section LaunchStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum" \
  .carry/dev/cuda_ops_bench --only qmv > "$D/i8-ncu.log" 2>&1
echo "== ncu: rc $? $((SECONDS - T0)) s"
grep -E "Duration|DRAM Throughput|Registers|Achieved Occupancy|Issued Warp|Eligible Warps|dram__|inst_executed" \
  "$D/i8-ncu.log" | sed -E 's/ +/ /g' | head -12
grep -E "issue_stalled" "$D/i8-ncu.log" | sed -E 's/ +/ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
  sort -k3 -g -r | head -10
echo "== done: $((SECONDS - T0)) s"
