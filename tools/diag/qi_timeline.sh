#!/usr/bin/env bash
# GPU machine (~1 min): bench/qi_timeline.cu built here twice (with and without the
# QW_TIMELINE stamps) and carried as .carry/tl/qi_tl, .carry/tl/qi_notl: the 8B q4g64 B=1
# layer's four fused qmv_i8 launches, when their warps reach each point of the walk.
#   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -DQW_TIMELINE \
#     bench/qi_timeline.cu src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu \
#     -o .carry/tl/qi_tl   (and qi_notl)
#   QI_TL="0 1 2" bash tools/diag/qi_timeline.sh
# QI_AB: values of qi_timeline.cu's QI_SET knob, each timed in one run (v / 100: 1 = an
# attention stand-in spinning 6 us between q/k/v and o, 2 = the same asking L2 for gate+up's
# blocks 1 .. v % 100; repeats show the spread); QI_TL: the stamped runs, one per value
# (stamped builds, v % 100: qw_diag_host: 1 = x made up in the in-CTA prep, not loaded;
# 2 = no in-CTA prep, x stale: its cost's bound).
set -u
. bench/device_env.sh
diag_init
QI_AB=${QI_AB:-0,0} timeout 60 .carry/tl/qi_notl "${ITERS:-20}" > "$D/qi_notl.log" 2>&1
echo "== qi_notl: rc $? $((SECONDS - T0)) s"
cat "$D/qi_notl.log"
for v in ${QI_TL:-0 1 2}; do
  QI_AB=$v timeout 60 .carry/tl/qi_tl "${ITERS:-20}" > "$D/qi_tl-$v.log" 2>&1
  echo "== qi_tl $v: rc $? $((SECONDS - T0)) s"
  cat "$D/qi_tl-$v.log"
done
