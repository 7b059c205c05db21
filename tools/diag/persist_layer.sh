#!/usr/bin/env bash
# GPU machine (~1-2 min): bench/persist_layer.cu (built here, carried as .carry/pp/persist_layer):
# the 8B q4g64 / q8g64 B=1 layer (q/k/v, attention over 512 cached tokens, o, gate+up, down)
# in one resident grid with per-warp shared-memory rings (or register batches) and grid-wide
# flags. Compare mode 0 (flags) with the bytes at 4,250 GB/s (q4 122.7 MB: 28.9 us; q8 231.7
# MB: 54.5 us; printed) and with today's engine layer (q4 ~57 us at ~550 tok/s, qi_timeline's
# four launches ~45 us + ~8.5 us of attention; q8 ~85 us at ~365 tok/s).
# Stage mask 12 is session 20's probe (gate+up then down: 23.3 us of bytes against ~31-33 us
# in today's two launches).
#   mkdir -p .carry/pp && nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc \
#     -Ibench bench/persist_layer.cu src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu \
#     -o .carry/pp/persist_layer
#   bash tools/diag/persist_layer.sh      (carry .carry/pp)
# Written in session 21 without a GPU: the first run may hang on a flag if a CTA is never
# counted (the timeouts end it) or fail a launch; debug there.
set -u
. bench/device_env.sh
diag_init
pl() {
  timeout 60 env "$@" .carry/pp/persist_layer "${ITERS:-20}" > "$D/pl.log" 2>&1
  local rc=$?
  echo "-- $*"; tail -n +2 "$D/pl.log"; [ $rc = 0 ] || echo "   rc $rc"
}
echo "== persist_layer (us a layer; the bytes at 4,250 GB/s in brackets)"
pl PL_CHECK=1 PL_ST=12 PL_MODE=0,1,2            # the arithmetic checked; the probe: two stages
pl PL_ST=15 PL_MODE=0,1,2                       # the layer, 512 tokens, 4 splits, all 5 configs
pl PL_ST=15 PL_MODE=0 PL_CFG=16 PL_SPLITS=2,8,16 PL_CTX=512,4096  # attention's shape
pl PL_ST=15 PL_MODE=0 PL_CFG=16 PL_CTX=0 PL_ATT=0,3000  # no attention / a 3 us stand-in
pl PL_ST=15 PL_MODE=0 PL_PREP=0 PL_CFG=16,12    # what the preps cost (x stale)
pl PL_ST=15 PL_MODE=0 PL_NL=1 PL_CFG=16         # one layer a launch: the launch's ramp
echo "== persist_layer: $((SECONDS - T0)) s"
