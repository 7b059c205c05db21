#!/usr/bin/env bash
# Builds (when needed) and runs cuda_ops_bench: correctness of every decode kernel against
# CPU references, then timings against the device's own copy bandwidth; the table is last.
#
#   bash bench/run_cuda_ops.sh [bench args, e.g. --only gemv]
#
# Binary: $CUDA_OPS_BIN, else build-cuda/bench/cuda_ops_bench (build it here with
#   cmake -S . -B build-cuda -G Ninja -DMLXCEL_CUDA=ON && cmake --build build-cuda --target cuda_ops_bench
# and carry that file). When it is missing or cannot load its libraries, it is built:
# with CMake when the project configures, else with plain nvcc (the GPU image lacks the
# host libraries the whole project needs; the kernels and the bench need only CUDA).
# With $OUT set, everything printed also goes to $OUT/cuda_ops.log, and the SASS of the
# binary (if cuobjdump exists) to $OUT/cuda_ops.sass.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${CUDA_OPS_BIN:-build-cuda/bench/cuda_ops_bench}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

. bench/device_env.sh # find_cublaslt, runnable
LTDIR=$(find_cublaslt)
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64${LTDIR:+:$LTDIR}"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/cuda_ops.log") 2>&1
fi

echo "== run_cuda_ops.sh $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv 2>/dev/null || echo "(nvidia-smi unavailable)"

build_nvcc() {
  echo "== building with nvcc directly ($NVCC)"
  local out=build-cuda-nvcc
  mkdir -p "$out"
  "${CC:-gcc}" -std=c11 -O2 -fopenmp -Wall -Wextra -c bench/cuda_ops_ref.c -o "$out/cuda_ops_ref.o" &&
  "${CC:-gcc}" -std=c11 -O2 -Wall -Wextra -I"$ROOT/src" -I/usr/local/cuda/include \
    -c src/backend/cuda/cuda_lt.c -o "$out/cuda_lt.o" &&
  "$NVCC" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
    -gencode=arch=compute_90,code=compute_90 -I"$ROOT/src" -I"$ROOT/bench" \
    src/backend/cuda/gemv.cu src/backend/cuda/norm_rope.cu src/backend/cuda/attn_decode.cu \
    src/backend/cuda/argmax.cu src/backend/cuda/cuda_info.cu src/backend/cuda/qgemv.cu \
    src/backend/cuda/qmv_tc.cu src/backend/cuda/qmv_bulk.cu src/backend/cuda/qmv_mma.cu src/backend/cuda/qmm.cu src/backend/cuda/ops_elem.cu \
    bench/cuda_ops.cu bench/cuda_ops_small.cu bench/cuda_ops_attn.cu bench/cuda_ops_qmv.cu \
    "$out/cuda_ops_ref.o" "$out/cuda_lt.o" ${LTDIR:+-L"$LTDIR"} -l:libcublasLt.so.13 -Xcompiler -fopenmp \
    -o "$out/cuda_ops_bench" &&
  BIN=$out/cuda_ops_bench
}

if ! runnable "$BIN"; then
  echo "== $BIN missing or not loadable; building"
  if command -v cmake >/dev/null &&
     cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON >/dev/null 2>&1 &&
     cmake --build build-cuda --target cuda_ops_bench -j "$(nproc)"; then
    BIN=build-cuda/bench/cuda_ops_bench
  else
    build_nvcc || { echo "build failed"; exit 2; }
  fi
fi
echo "== binary: $BIN (cuBLASLt from ${LTDIR:-the default library path})"

# SASS: are the weight/KV loads 16 bytes wide (LDG.E.128), any local memory (LDL/STL)?
if command -v cuobjdump >/dev/null; then
  if [ -n "${OUT:-}" ]; then sass="$OUT/cuda_ops.sass"; else sass=$(mktemp); fi
  cuobjdump --dump-sass "$BIN" > "$sass" 2>/dev/null
  awk '/Function :/ { if (fn) printf "  %-70s LDG.128 %3d  LDL/STL %d\n", fn, w, l; fn = $3; w = 0; l = 0 }
       /LDG[.A-Z0-9]*\.128/ { w++ } /[^A-Za-z_](LDL|STL)[. ]/ { l++ }
       END { if (fn) printf "  %-70s LDG.128 %3d  LDL/STL %d\n", fn, w, l }' "$sass" |
    grep -E "gemv|qmv|attn|rmsnorm|rope|argmax" || true
fi

echo "== cuda_ops_bench $*"
"$BIN" "$@"
rc=$?
echo "== exit $rc"
exit $rc
