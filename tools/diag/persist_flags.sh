#!/usr/bin/env bash
# GPU machine (~30 s): what a grid flag of bench/persist_layer.cu costs (session 23: ~3 us a
# stage boundary under the weight streams): mode 3 (the flags alone, nothing streamed) against
# mode 0 (flags + streaming + compute) and 1 (no flags), each flag kind (PL_FLAGK 0: fence +
# atomic add; 1: one red.release), q4 16 x 2, no preps (x stale: times stand), then the whole
# layer with attention and preps.
# Build here (carry .carry/pp.tar.xz):
#   mkdir -p .carry/pp && nvcc -O3 -lineinfo -std=c++17 -gencode arch=compute_90a,code=sm_90a \
#     -Isrc -Ibench bench/persist_layer.cu src/backend/cuda/cuda_info.cu \
#     src/backend/cuda/qtile.cu -o .carry/pp/persist_layer
#   tar cf - -C .carry pp | xz -9 -T2 > .carry/pp.tar.xz
set -u
. bench/device_env.sh
diag_init
[ -x .carry/pp/persist_layer ] || tar xJf .carry/pp.tar.xz -C .carry
pl() { timeout 60 env PL_BITS=4 PL_CFG=16 "$@" .carry/pp/persist_layer 20 2>&1 | grep "^q" |
  sed -E 's/ us a layer.*//'; }
pl PL_ST=15 PL_CTX=0 PL_PREP=0 PL_MODE=3,0,1 PL_FLAGK=0,1
pl PL_ST=15 PL_CTX=512 PL_PREP=1 PL_MODE=3,0 PL_FLAGK=0,1
pl PL_ST=2 PL_CTX=0 PL_PREP=0 PL_MODE=3,0,1 PL_FLAGK=0,1
echo "== persist_flags: $((SECONDS - T0)) s"
