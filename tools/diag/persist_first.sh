#!/usr/bin/env bash
# GPU machine, one call (~4 min): the two open questions session 20 left for #6's B=1 step.
# 1. bench/persist_layer.cu (never run before: debug here) beside qi_timeline's unstamped layer
#    (today's four launches, and with a 6 us attention stand-in: QI_AB 100);
# 2. the pre-wait stages of 02f6ec3 with one carveout for the chain (prewait_carveout.sh).
# Build and pack here first:
#   mkdir -p .carry/pp && for t in persist_layer qi_timeline; do
#     nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Ibench bench/$t.cu \
#       src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu -o .carry/pp/$t; done
#   BASE=02f6ec3 XZ=1 bash bench/pack_device.sh
#   tar cf - -C .carry pp | xz -9 -T2 > .carry/pp.tar.xz
# Carry .carry/devpack.tar.xz and .carry/pp.tar.xz.   bash tools/diag/persist_first.sh
set -u
. bench/device_env.sh
diag_init
tar xJf .carry/pp.tar.xz -C .carry
QI_AB=0,100,0,100 timeout 60 .carry/pp/qi_timeline 20 2>&1 | tail -4
echo "== qi_timeline: $((SECONDS - T0)) s"
bash tools/diag/persist_layer.sh
bash tools/diag/prewait_carveout.sh
