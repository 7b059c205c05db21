#!/usr/bin/env bash
# GPU machine: test_cuda in the four configurations run_device.sh uses (unless SKIP_TESTS=1),
# then Nsight Compute on the one-row 4-bit qmv kernels of cuda_ops_bench (KERNELS, SHAPES),
# one launch each (the 4th: past the check and the warm-up), and the SASS of the CUDA-core
# kernel. Carry .carry/devpack.tar.xz (unpacked to .carry/dev). Output: $OUT/diag/.
#   KERNELS="qmv_fast_kernel qmv_bulk_kernel" SHAPES="gate+up o" ROWS=1 BITS=4
set -u
. bench/device_env.sh
diag_init
T=.carry/dev/test_cuda
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 $T . > "$D/tests.log" 2>&1; r1=$?
  TEST_CUDA_ONLY=attn,e2e MLXCEL_SDPA_DETERMINISTIC=1 timeout 150 $T . > "$D/det.log" 2>&1; r2=$?
  TEST_CUDA_ONLY=e2e MLX_CUDA_GRAPH_CACHE_SIZE=0 timeout 150 $T . > "$D/nograph.log" 2>&1; r3=$?
  TEST_CUDA_ONLY=ops,attn,e2e MLXCEL_CUDA_PDL=0 timeout 150 $T . > "$D/nopdl.log" 2>&1; r4=$?
  for f in tests det nograph nopdl; do
    echo "test_cuda $f: $(grep -c '^FAIL' "$D/$f.log") FAIL | $(tail -1 "$D/$f.log")"
  done
  echo "rc: $r1 $r2 $r3 $r4"
  grep '^FAIL' "$D"/*.log | head -10
fi
B=.carry/dev/cuda_ops_bench
for s in ${SHAPES:-gate+up o}; do
  for k in ${KERNELS:-qmv_fast_kernel qmv_bulk_kernel}; do
    f="$D/ncu_${k}_${s}.txt"
    QMV_SHAPE=$s QMV_ROWS=${ROWS:-1} QMV_BITS=${BITS:-4} timeout 120 "$NCU" --kernel-name "regex:$k" \
      --launch-skip 3 --launch-count 1 --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section SchedulerStats --section WarpStateStats \
      --section InstructionStats --section MemoryWorkloadAnalysis "$B" --only qmv > "$f" 2>&1
    echo "== $k $s R=${ROWS:-1}"
    grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per|Issued Warp Per|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Executed Instructions  |Block Limit Registers|Waves Per SM" "$f" | sed 's/  */ /g' | head -20
  done
done
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass -fun '_Z15qmv_fast_kernelILi4ELi1ELi0EEv8qmv_segsPKfS2_iiiii' "$B" > "$D/qmv_fast_4_1.sass" 2>&1
  echo "qmv_fast<4,1,bf16> SASS: $(grep -c '^ */\*[0-9a-f]*\*/' "$D/qmv_fast_4_1.sass") instructions"
fi
