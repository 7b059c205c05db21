#!/usr/bin/env bash
# GPU machine (~3 min): why bench/persist_layer.cu's q4 stages 12 (gate+up, down) compute
# slower than they stream (session 23: mode 1, no flags, 31.1 us a layer against mode 2's
# copy-only 21.9 us; 16 warps, ring 2). First the lines session 23's persist_first call cut
# off (qi_timeline; PL_CHECK of both widths), the stages with and without the preps, then Nsight Compute on one launch of each mode
# (issue rate, per-issue stall reasons) and the source-level stall samples of mode 1.
# Build with -lineinfo here (carry .carry/pp.tar.xz and .carry/devpack.tar.xz):
#   mkdir -p .carry/pp && for t in persist_layer qi_timeline; do
#     nvcc -O3 -lineinfo -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Ibench \
#       bench/$t.cu src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu -o .carry/pp/$t; done
#   tar cf - -C .carry pp | xz -9 -T2 > .carry/pp.tar.xz
set -u
. bench/device_env.sh
diag_init
tar xJf .carry/pp.tar.xz -C .carry
QI_AB=0,100,0,100 timeout 60 .carry/pp/qi_timeline 20 2>&1 | tail -4
PL_CHECK=1 PL_ST=12 PL_MODE=0 PL_CFG=16 timeout 60 .carry/pp/persist_layer 5 2>&1 | grep -v "^q"
echo "-- the preps' share (x stale with PL_PREP=0; times stand)"
for st in 12 15; do
  env PL_CFG=16 PL_ST=$st PL_CTX=0 PL_MODE=0,1,2 PL_PREP=0,1 timeout 60 .carry/pp/persist_layer 10 2>&1 |
    grep "^q" | sed -E 's/ us a layer.*//'
done
PL="PL_BITS=4 PL_CFG=16 PL_ST=12 PL_NL=16"
for m in 1 2 0; do
  env $PL PL_MODE=$m timeout 150 "$NCU" --kernel-name regex:pl_kernel --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum" \
    .carry/pp/persist_layer 3 > "$D/pl-ncu-$m.log" 2>&1
  echo "== mode $m: rc $? $((SECONDS - T0)) s"
  grep -E "Duration|DRAM Throughput|Issued Warp|Eligible Warps|No Eligible|inst_executed|dram__bytes" \
    "$D/pl-ncu-$m.log" | sed -E 's/ +/ /g' | head -8
  grep -E "issue_stalled" "$D/pl-ncu-$m.log" | sed -E 's/ +/ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
    sort -k3 -g -r | head -8
done
env $PL PL_MODE=1 KERNEL=pl_kernel SKIP=2 TOP=30 bash tools/diag/ncu_source.sh .carry/pp/persist_layer 3
echo "== end: $((SECONDS - T0)) s"
