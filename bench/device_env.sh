# Sourced (not run) by the GPU-machine scripts from the repository root: run_device.sh,
# tune_device.sh (budget, libraries, binary) and run_cuda_ops.sh (find_cublaslt, runnable).
#
# The budget helpers read T0 (the script's start, in $SECONDS) and BUDGET (seconds);
# device_libs reads ROOT (the repository root); device_build writes $LOG/build.log;
# find_cublaslt runs ${PY:-python3}.

# ==== Budget ====
left() { echo $((BUDGET - (SECONDS - T0))); }
stage() { echo "== [$((SECONDS - T0)) s] $*"; }
# a stage never gets less than 10 s (timeout 0 would mean no limit)
tl() { local l=$(left); [ "$l" -lt 10 ] && l=10; echo "$l"; }

# ==== Libraries ====
# cuBLASLt 13 may live in the CUDA tree or only in the Python wheels (nvidia-cublas); prints
# its directory, or nothing.
find_cublaslt() {
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublasLt.so.13" ] && { echo "$d"; return; }
  done
  "${PY:-python3}" - <<'PY' 2>/dev/null
import glob, os, site
for p in site.getsitepackages():
    for f in glob.glob(os.path.join(p, "nvidia", "**", "libcublasLt.so.13*"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit
PY
}

# Sets LTDIR and puts the carried libraries (.carry/dev/lib, from pack_device.sh), cuBLASLt
# and the CUDA tree ahead of what LD_LIBRARY_PATH held.
device_libs() {
  LTDIR=$(find_cublaslt)
  export LD_LIBRARY_PATH="$ROOT/.carry/dev/lib${LTDIR:+:$LTDIR}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The tools/diag scripts' start: the carried pack unpacked (once), the libraries, NCU (the
# Nsight Compute binary, or empty), D=$OUT/diag and T0 (the start, for elapsed seconds).
diag_init() {
  ROOT=$PWD
  [ -d .carry/dev ] || tar xJf .carry/devpack.tar.xz -C .carry
  device_libs
  NCU=$(command -v ncu ||
        ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  D=${OUT:-/tmp}/diag; mkdir -p "$D"
  T0=$SECONDS
}

# The synthetic SHAPE's config.json alone (for --load-format dummy), under /tmp/mlxcel-cfg;
# prints its directory.
dummy_config() {
  local c=/tmp/mlxcel-cfg/$1
  python3 tools/reference/make_synthetic.py "$c" --shape "$1" --config-only >/dev/null && echo "$c"
}
# The environment assignments of one A/B entry: "-" = none, "A=1,B=2" = two.
ab_env() { [ "$1" = - ] || echo "${1//,/ }"; }
# Calls "$@" SHAPE CONFIG_DIR ENV AB for every shape of SHAPES (default llama-3.1-8b) and
# entry of AB (default "-"), ENV as ab_env gives it.
each_shape_ab() {
  local s c ab
  for s in ${SHAPES:-llama-3.1-8b}; do
    c=$(dummy_config "$s") || return 1
    for ab in ${AB:--}; do "$@" "$s" "$c" "$(ab_env "$ab")" "$ab"; done
  done
}

# ==== The diag scripts' common stages (read D and T0) ====
# test_cuda with every group as is, then its quant and e2e groups once per further A/B entry
# ("A=1,B=2"); logs $D/test-*.log; one summary line each and the first failures.
# tools/diag/bench_ab.sh under a timeout of $1 seconds (SHAPES, BATCH, REPEAT, AB as it reads
# them), each line cut to shape, entry, batch, decode tok/s, % of copy.
diag_ab() { timeout "$1" bash tools/diag/bench_ab.sh | awk '{print $1,$2,$3,$6,$12}'; }
# tools/diag/quant_b1.sh (the synthetic 8B, MLX-converted) under a timeout of $1 seconds
# (QUANT, BATCH, REPEAT, AB, BF16 as it reads them), its lines cut like diag_ab's; "== " lines
# only where they match $2.
diag_quant() {
  timeout "$1" bash tools/diag/quant_b1.sh |
    awk -v keep="${2:-^$}" '/^==/ { if ($0 ~ keep) print; next } {print $1,$2,$3,$6,$12}'
}
# "BIN=mlxcel-base" after the prefix $1 when that build was packed beside (pack_device.sh BASE=).
diag_base() { [ -x .carry/dev/mlxcel-base ] && echo "${1:-}BIN=mlxcel-base"; }
# test_cuda with the A/B entry $1 ("-" or "A=1,B=2") and TEST_CUDA_ONLY=$2 (empty: every
# group); log $D/test-<entry>.log; prints a summary line and the first failures.
diag_test() {
  local e=$1 g=${2:-} n=${1%%=*}
  env $(ab_env "$e") ${g:+TEST_CUDA_ONLY=$g} timeout "${TEST_TIMEOUT:-200}" .carry/dev/test_cuda . \
    > "$D/test-$n.log" 2>&1
  echo "== test ${g:-all} $e: rc $? $(tail -1 "$D/test-$n.log"), $((SECONDS - T0)) s"
  grep '^FAIL' "$D/test-$n.log" | head -5 | cut -c1-160
}
# test_cuda in full, then B=1 decode against the build packed beside (BIN=mlxcel-base),
# interleaved: 8B / 1B bf16 (dummy weights) in $1 rounds, the synthetic 8B as MLX q4g64 in $2.
diag_b1_vs_base() {
  local B i ab1="" ab2=""
  B=$(diag_base)
  for ((i = 0; i < ${1:-2}; i++)); do ab1="$ab1 - $B"; done
  for ((i = 0; i < ${2:-2}; i++)); do ab2="$ab2 - $B"; done
  diag_test -
  SHAPES="llama-3.1-8b llama-3.2-1b" BATCH=1 REPEAT=2 AB="$ab1" diag_ab 200
  echo "== bf16: $((SECONDS - T0)) s"
  AB="$ab2" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 diag_quant 200 "^== conv"
}
# test_cuda in full as is, then its quant + e2e groups with each A/B entry given.
diag_tests() {
  local e
  for e in - "$@"; do diag_test "$e" "$([ "$e" != - ] && echo quant,e2e)"; done
}
# cuda_ops_bench --only qmv (log $D/qmv.log), then its lines matching the regex $1, shortened.
diag_qmv_bench() {
  timeout 200 .carry/dev/cuda_ops_bench --only qmv > "$D/qmv.log" 2>&1
  echo "== op bench: rc $? $((SECONDS - T0)) s"
  grep -E "$1" "$D/qmv.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g; s/ GB.s.*//' | cut -c1-90
}

# ==== Binaries ====
# Whether $1 is an executable whose shared libraries all resolve here.
runnable() { [ -x "$1" ] && ! ldd "$1" 2>/dev/null | grep -q "not found"; }

# Builds the CMake targets $@ into build-dev (log: $LOG/build.log); on failure prints the
# log's tail and returns 1.
device_build() {
  if cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON > "$LOG/build.log" 2>&1 &&
     cmake --build build-dev --target "$@" -j "$(nproc)" >> "$LOG/build.log" 2>&1; then
    return 0
  fi
  tail -20 "$LOG/build.log"
  return 1
}
