#!/usr/bin/env bash
# The tensor-core qmv (src/backend/cuda/qmv_tc.cu) on the GPU machine, one command:
#   1. cuda_ops_bench --only qmv (carried by bench/pack_device.sh, else built here): new vs
#      old kernel on the Llama-3.1-8B shapes (q4g64 and q8g64, rows 1, 8, 32), each checked
#      new vs old first, then timed: GB/s and % of the measured D2D copy bandwidth;
#   2. the quantized GPU tests (test_cuda, TEST_CUDA_ONLY=quant: cuda_qmv_tc vs the CPU
#      reference over bits x groups x rows x segments x windows, and the dispatch with the
#      kernel on and off), with the default MLXCEL_QMV_TC=1 and with MLXCEL_QMV_TC=0; needs a
#      carried .carry/dev/test_cuda (bench/pack_device.sh) or a tree that builds here;
#   3. with E2E=1: bench/run_device.sh on llama-3.1-8b q4g64 + q8g64 (B = 1, 8, 32) with
#      AB_QMV_TC=1 (each quantized bench again with MLXCEL_QMV_TC=0), into $OUT/e2e.
# Results under $OUT (default /tmp/mlxcel-qmv); the short table is printed last.
#
#   here:        bash bench/pack_device.sh                     # builds + packs .carry/dev
#   GPU machine: OUT=$OUT bash bench/run_qmv_tc.sh             # carry .carry/dev; ~3 min
#                OUT=$OUT E2E=1 bash bench/run_qmv_tc.sh       # + end to end (~9 min more)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/mlxcel-qmv}
LOG=$OUT
mkdir -p "$OUT"
T0=$SECONDS
BUDGET=${BUDGET:-540}
. bench/device_env.sh # stage, device_libs, runnable, device_build
device_libs

# ==== 1. Kernel table ====
# the binary bench/pack_device.sh carried, else a fresh build of this tree
BENCHBIN=.carry/dev/cuda_ops_bench
runnable "$BENCHBIN" || BENCHBIN=/nonexistent
stage "cuda_ops_bench --only qmv ($BENCHBIN)"
CUDA_OPS_BIN=$BENCHBIN OUT="$OUT" timeout 420 bash bench/run_cuda_ops.sh --only qmv > /dev/null 2>&1
rc_bench=$?
[ -s "$OUT/cuda_ops.log" ] || echo "(no cuda_ops.log: the build failed?)"
grep -E "^  check|copy roofline|build failed|FAIL" "$OUT/cuda_ops.log" 2>/dev/null | head -40

# ==== 2. GPU tests ====
TESTBIN=.carry/dev/test_cuda
if ! runnable "$TESTBIN"; then
  stage "no carried test_cuda; building it here"
  if device_build test_cuda; then TESTBIN=build-dev/tests/gpu/test_cuda; else TESTBIN=""; fi
fi
TESTS="not run (no test_cuda)"
if [ -n "$TESTBIN" ]; then
  stage "GPU tests: TEST_CUDA_ONLY=quant, MLXCEL_QMV_TC=1 then 0"
  TEST_CUDA_ONLY=quant timeout 200 "$TESTBIN" "$ROOT" > "$OUT/tests_tc1.log" 2>&1; rc1=$?
  TEST_CUDA_ONLY=quant MLXCEL_QMV_TC=0 timeout 200 "$TESTBIN" "$ROOT" > "$OUT/tests_tc0.log" 2>&1; rc0=$?
  grep -E "^FAIL" "$OUT/tests_tc1.log" | head -20
  grep -E "^FAIL" "$OUT/tests_tc0.log" | head -10
  TESTS="MLXCEL_QMV_TC=1: rc $rc1, $(grep -c '^FAIL' "$OUT/tests_tc1.log") FAIL, $(grep -c 'qmv_tc\|qmv-tc' "$OUT/tests_tc1.log") tensor-core checks; MLXCEL_QMV_TC=0: rc $rc0, $(grep -c '^FAIL' "$OUT/tests_tc0.log") FAIL"
fi

# ==== 3. End to end (optional) ====
if [ "${E2E:-0}" = 1 ]; then
  stage "end to end: run_device.sh llama-3.1-8b q4g64 + q8g64, AB_QMV_TC=1"
  OUT="$OUT/e2e" SHAPES=llama-3.1-8b QUANT="4:64 8:64" AB_QMV_TC=1 SKIP_HF=1 SERVE=0 SKIP_TESTS=1 \
    BATCH=1,8,32 REPEAT=2 SKIP_NVCC_CHECK=1 timeout 560 bash bench/run_device.sh > "$OUT/e2e.log" 2>&1
  grep -E "tok/s|decode|MLXCEL_QMV_TC" "$OUT/e2e.log" | head -40
fi

# ==== Short table ====
echo
echo "== qmv tensor-core summary ($(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
grep -E "copy bandwidth|copy roofline" "$OUT/cuda_ops.log" 2>/dev/null | tail -1
printf "%-14s %-30s %10s %8s %6s %s\n" op shape med_us GB/s %copy check
grep -E "^(qmv_tc|old qmv|old qmm) " "$OUT/cuda_ops.log" 2>/dev/null |
  awk '{ n = NF; op = $1 " " $2; if ($1 == "old") { op = $1 " " $2 " " $3; s = 4 } else s = 3;
         shape = $s " " $(s + 1) " " $(s + 2);
         printf "%-14s %-30s %10s %8s %6s %s\n", op, shape, $(n - 5), $(n - 3), $(n - 2), $n }'
echo "bench exit $rc_bench; tests: $TESTS"
