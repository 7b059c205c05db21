#!/usr/bin/env bash
# GPU machine (~1 min): bench/persist_probe.cu (built here, carried as .carry/pp/persist_probe):
# can one resident grid stream gate+up then down (8B q4g64, tiled) through per-warp
# shared-memory rings at the DRAM rate, with a grid-wide flag between them? Compare its mode 0
# (flag) with 4,250 GB/s and with qi_timeline's gate+up + down (~31-33 us, session 17).
#   mkdir -p .carry/pp && nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc \
#     -Ibench bench/persist_probe.cu src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu \
#     -o .carry/pp/persist_probe
#   PP_AB="0,1,2,0" bash tools/diag/persist_probe.sh      (carry .carry/pp)
# Written in session 20 without a GPU: the first run may hang on the flag if a warp is never
# counted (the timeout ends it) or fail a launch; debug there.
set -u
. bench/device_env.sh
diag_init
PP_AB=${PP_AB:-0,1,2,0} timeout 90 .carry/pp/persist_probe "${ITERS:-20}" > "$D/pp.log" 2>&1
echo "== persist_probe: rc $? $((SECONDS - T0)) s"
cat "$D/pp.log"
