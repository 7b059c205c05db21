#!/usr/bin/env bash
# One call on the GPU machine: binaries check, GPU tests, synthetic real-size checkpoints,
# `mlxcel bench` on them, transformers' own generate() on the same weights, top-1 agreement;
# results (date, commit, device) into $OUT; the short table is printed last.
#
#   here:        bash bench/pack_device.sh                 # builds + packs .carry/dev
#   GPU machine: bash bench/run_device.sh                  # carry: .carry/dev
#
# Environment (defaults):
#   SHAPES="llama-3.2-1b llama-3.1-8b"   any of llama-3.2-1b llama-3.1-8b qwen3-8b qwen3-30b-a3b
#                                        (qwen3-30b-a3b is 61 GB: run it alone; ~6 min)
#   BATCH=1,8,32  REPEAT=3  PROMPT=512  GEN=128  PREFILL_LONG=2048
#   SKIP_TESTS=0  SKIP_HF=0  HF_TIMING=1 (0: transformers only for the agreement check)
#   AB_ENV="" (e.g. "MLXCEL_GEMV_FUSE=1 MLXCEL_LT_SPLITK=0": decode again with each, AB_BATCH=1;
#   "A=1,B=2" sets both in one run)
#   PROFILE=0 (1: ncu kernel times of a decode step at B=1 and B=32 and of a long prefill)
#    KEEP=0 (1: keep the checkpoints in $WORK)  BUDGET=540 (seconds;
#   stages that would start later are skipped and say so)  WORK=/tmp/mlxcel-dev
#   QUANT="4:64 8:64" (bits:group, default for llama-3.1-8b only; QUANT="" skips): each shape
#   is also converted with `mlxcel convert -q`, benched (BATCH, prefill PREFILL_LONG) and
#   compared with its bf16 reference (`mlxcel compare`, 256 tokens: top-1 agreement, KL)
#   TP=1: then bench/tp_device.sh (tensor parallelism: NCCL group of one, TP 2/4 with >= 2 GPUs)
#   AB_QMV_TC=0 (1: each quantized shape is also benched with MLXCEL_QMV_TC=0, printed only)
#   QUANT_AB_ENV="" (as AB_ENV, for each quantized variant; same AB_BATCH)
#   SERVE=1: for llama-3.1-8b, `mlxcel serve --device cuda` + `mlxcel loadtest` at SERVE_CONC
#   (default 1,8,32,64,128,256), PROMPT/GEN tokens, within SERVE_BUDGET=150 s
#   (bench/serve_loadtest.sh; needs the Llama 3 tokenizer that pack_device.sh packs); 0 skips
# Output ($OUT, at most 3 files come back): <date>-<commit>-<tag>.json, the same .md, and
# logs-<tag>.tgz with every log. Copy the first two into bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$SECONDS
OUT=${OUT:-/tmp/mlxcel-out}
WORK=${WORK:-/tmp/mlxcel-dev}
SHAPES=${SHAPES:-"llama-3.2-1b llama-3.1-8b"}
BATCH=${BATCH:-1,8,32}
REPEAT=${REPEAT:-3}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
PREFILL_LONG=${PREFILL_LONG:-2048}
BUDGET=${BUDGET:-540}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK/logs" "$WORK/res"
rm -f "$WORK/res/quant.list"
LOG=$WORK/logs
RES=$WORK/res
TAG=$(echo "$SHAPES" | tr ' ' '_')
COMMIT=${COMMIT:-$(cat .carry/dev/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
DATE=$(date -u +%Y-%m-%d)
. bench/device_env.sh # left stage tl, device_libs, runnable, device_build
exec > >(tee -a "$LOG/run.log") 2>&1

# ==== Device and libraries ====
stage "run_device.sh $DATE commit $COMMIT shapes: $SHAPES"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu \
  --format=csv > "$LOG/nvidia-smi.csv" 2>&1 || echo "(nvidia-smi unavailable)" > "$LOG/nvidia-smi.csv"
cat "$LOG/nvidia-smi.csv"
device_libs
MLX=.carry/dev/mlxcel
TESTBIN=.carry/dev/test_cuda
if ! runnable "$MLX"; then
  stage "carried binaries missing or not loadable; building here with CMake"
  if device_build mlxcel test_cuda; then
    MLX=build-dev/mlxcel
    TESTBIN=build-dev/tests/gpu/test_cuda
  else
    echo "FATAL: no runnable mlxcel (run bench/pack_device.sh on the build machine and carry .carry/dev)"
    exit 2
  fi
fi
ldd "$MLX" > "$LOG/ldd.txt" 2>&1
# build check with this machine's nvcc: every kernel file compiles (-Werror), in parallel
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$NVCC" ] && [ "${SKIP_NVCC_CHECK:-0}" != 1 ]; then
  stage "nvcc build check ($("$NVCC" --version | tail -1))"
  mkdir -p "$WORK/obj"
  if ls src/backend/cuda/*.cu | xargs -P "$(nproc)" -I{} sh -c \
      '"$0" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90 \
       -Werror=all-warnings -Xptxas -v -Isrc -c {} -o "$1/obj/$(basename {}).o" 2>> "$1/logs/nvcc.log"' \
      "$NVCC" "$WORK"; then echo "nvcc: all kernel files compile"; else echo "nvcc: FAILED (see nvcc.log)"; fi
  grep -E "bytes stack frame" "$LOG/nvcc.log" | grep -v "^ *0 bytes stack" | sort | uniq -c | head -5
fi
# SASS sanity: tensor-core MMAs in the flash kernel, 128-bit loads in the GEMV, no local memory
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass "$MLX" > "$LOG/mlxcel.sass" 2>/dev/null
  awk '/Function :/ { if (fn) printf "  %-60.60s HMMA %4d LDG.128 %4d LDSM %3d LDL/STL %d\n", fn, m, w, s, l;
                      fn = $3; m = 0; w = 0; s = 0; l = 0 }
       /HMMA/ { m++ } /LDG[.A-Z0-9]*\.128/ { w++ } /LDSM/ { s++ } /[^A-Za-z_](LDL|STL)[. ]/ { l++ }
       END { if (fn) printf "  %-60.60s HMMA %4d LDG.128 %4d LDSM %3d LDL/STL %d\n", fn, m, w, s, l }' \
    "$LOG/mlxcel.sass" | grep -E "flash|gemv|qmv|attn|moe" | head -40
fi
echo "mlxcel: $MLX, cuBLASLt from ${LTDIR:-the default path}"

# ==== GPU tests: default, deterministic, without graphs ====
TESTS="skipped"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  stage "GPU tests (ops vs CPU, end to end): all; then attention + e2e deterministic, e2e without graphs, ops + attention + e2e without PDL"
  timeout 300 "$TESTBIN" "$ROOT" > "$LOG/tests.log" 2>&1; rc1=$?
  grep '^group ' "$LOG/tests.log" | tr '\n' ' '; echo
  TEST_CUDA_ONLY=attn,e2e MLXCEL_SDPA_DETERMINISTIC=1 timeout 150 "$TESTBIN" "$ROOT" > "$LOG/tests_det.log" 2>&1; rc2=$?
  TEST_CUDA_ONLY=e2e MLX_CUDA_GRAPH_CACHE_SIZE=0 timeout 150 "$TESTBIN" "$ROOT" > "$LOG/tests_nograph.log" 2>&1; rc3=$?
  TEST_CUDA_ONLY=ops,attn,e2e MLXCEL_CUDA_PDL=0 timeout 150 "$TESTBIN" "$ROOT" > "$LOG/tests_pdl.log" 2>&1; rc4=$?
  echo "with MLXCEL_CUDA_PDL=0: $(grep -c '^FAIL' "$LOG/tests_pdl.log") failed: $(grep '^FAIL' "$LOG/tests_pdl.log" | head -5 | tr '\n' ';')"
  grep -E "^(FAIL|device)" "$LOG/tests.log" | head -40
  tail -1 "$LOG/tests.log"
  same=yes
  # the cases both runs have (the no-graph run skips some groups): same key, same tokens
  join <(grep '^tokens ' "$LOG/tests.log" | awk '{k=$1; for(i=2;i<NF;i++) k=k"_"$i; print k, $NF}' | sort) \
       <(grep '^tokens ' "$LOG/tests_nograph.log" | awk '{k=$1; for(i=2;i<NF;i++) k=k"_"$i; print k, $NF}' | sort) |
    awk '$2 != $3' > "$LOG/graph_vs_eager.diff"
  [ -s "$LOG/graph_vs_eager.diff" ] && same=NO
  same="$same ($(join <(grep '^tokens ' "$LOG/tests.log" | awk '{k=$1; for(i=2;i<NF;i++) k=k"_"$i; print k}' | sort) \
       <(grep '^tokens ' "$LOG/tests_nograph.log" | awk '{k=$1; for(i=2;i<NF;i++) k=k"_"$i; print k}' | sort) | wc -l) cases)"
  echo "graph replay vs eager tokens identical: $same"
  TESTS="default rc $rc1 ($(tail -1 "$LOG/tests.log")); deterministic rc $rc2; no graphs rc $rc3; no PDL rc $rc4; graph==eager tokens: $same"
fi

# A/B decode: ab_decode DIR SHAPE PREFIX ENV... runs AB_BATCH once per ENV ("A=1,B=2" sets
# both), each printed line prefixed with PREFIX and the ENV, and kept in $RES/SHAPE.ab.txt.
ab_decode() {
  local dir=$1 shape=$2 prefix=$3 ab
  shift 3
  for ab in "$@"; do
    stage "$shape ${prefix}: decode (batch ${AB_BATCH:-1}) with $ab (A/B)"
    env ${ab//,/ } timeout 90 "$MLX" bench -m "$dir" --device cuda --prompt-tokens "$PROMPT" \
      --gen-tokens "$GEN" --batch "${AB_BATCH:-1}" --repeat 2 2>/dev/null | grep -E '^ +[0-9]+ ' |
      sed "s/^/$prefix$ab /" | tee -a "$RES/$shape.ab.txt"
  done
}

# ==== Per shape: synthetic checkpoint, mlxcel bench, transformers, agreement ====
for shape in $SHAPES; do
  dir=$WORK/$shape
  if [ "$(left)" -lt 60 ]; then stage "SKIP $shape: budget left $(left) s"; continue; fi
  if [ ! -e "$dir/config.json" ]; then
    stage "$shape: synthetic checkpoint"
    timeout "$(tl)" "$PY" tools/reference/make_synthetic.py "$dir" --shape "$shape" > "$LOG/$shape.synth.log" 2>&1 ||
      { tail -5 "$LOG/$shape.synth.log"; continue; }
  fi
  stage "$shape: mlxcel bench (batch $BATCH, prompt $PROMPT, gen $GEN, repeat $REPEAT)"
  MLXCEL_PROFILE_TTFT=1 timeout "$(tl)" "$MLX" bench -m "$dir" --device cuda --prompt-tokens "$PROMPT" \
    --gen-tokens "$GEN" --batch "$BATCH" --repeat "$REPEAT" --json > "$RES/$shape.mlxcel.json" 2> "$LOG/$shape.bench.log"
  tail -3 "$LOG/$shape.bench.log"
  ab_decode "$dir" "$shape" "" ${AB_ENV:-}
  if [ "${AB_PDL:-0}" = 1 ]; then
    stage "$shape: B=1 decode with MLXCEL_CUDA_PDL=0 (A/B)"
    MLXCEL_CUDA_PDL=0 timeout 60 "$MLX" bench -m "$dir" --device cuda --prompt-tokens "$PROMPT" \
      --gen-tokens "$GEN" --batch 1 --repeat 1 2>/dev/null | tail -2
  fi
  stage "$shape: mlxcel prefill $PREFILL_LONG"
  timeout "$(tl)" "$MLX" bench -m "$dir" --device cuda --prompt-tokens "$PREFILL_LONG" --gen-tokens 2 \
    --batch 1 --repeat "$REPEAT" --json > "$RES/$shape.mlxcel_long.json" 2> "$LOG/$shape.bench_long.log"
  stage "$shape: mlxcel greedy 256 tokens for the agreement check"
  ids=$("$PY" -c "import random; r=random.Random(7); print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
  timeout "$(tl)" "$MLX" generate -m "$dir" --device cuda --prompt-ids "$ids" -n 256 --temp 0 --ignore-eos \
    --json > "$RES/$shape.generate.json" 2> "$LOG/$shape.generate.log"
  # the server under load on the same checkpoint (before transformers: the budget favours it)
  if [ "$shape" = llama-3.1-8b ] && [ "${SERVE:-1}" != 0 ]; then
    sb=$(( $(left) - 10 ))
    [ "$sb" -gt "${SERVE_BUDGET:-150}" ] && sb=${SERVE_BUDGET:-150}
    if [ "$sb" -lt 90 ]; then stage "SKIP $shape: serve + loadtest: budget left $(left) s"
    else
      stage "$shape: mlxcel serve --device cuda + mlxcel loadtest (concurrency ${SERVE_CONC:-1,8,32,64,128,256}, $sb s)"
      PROMPT=$PROMPT GEN=$GEN PYTHON=$PY timeout $((sb + 30)) bash bench/serve_loadtest.sh "$MLX" "$dir" "$shape" \
        "$RES" "$LOG" "$sb"
      echo "serve + loadtest exit status $? (0: no failed request, every KV block free at the end)"
    fi
  fi
  # ---- MLX affine quantized variants of the same weights ----
  quant=${QUANT-DEFAULT}
  [ "$quant" = DEFAULT ] && { [ "$shape" = llama-3.1-8b ] && quant="4:64 8:64" || quant=""; }
  for q in $quant; do
    qb=${q%%:*}; qg=${q##*:}; qt="q${qb}g${qg}"; qdir=$WORK/$shape-$qt
    if [ "$(left)" -lt 90 ]; then stage "SKIP $shape $qt: budget left $(left) s"; continue; fi
    stage "$shape $qt: mlxcel convert -q --q-bits $qb --q-group-size $qg"
    rm -rf "$qdir"
    timeout "$(tl)" "$MLX" convert --hf-path "$dir" --mlx-path "$qdir" -q --q-bits "$qb" \
      --q-group-size "$qg" > "$LOG/$shape.$qt.convert.log" 2>&1 || { tail -3 "$LOG/$shape.$qt.convert.log"; continue; }
    stage "$shape $qt: mlxcel bench (batch $BATCH) + prefill $PREFILL_LONG"
    timeout "$(tl)" "$MLX" bench -m "$qdir" --device cuda --prompt-tokens "$PROMPT" --gen-tokens "$GEN" \
      --batch "$BATCH" --repeat "$REPEAT" --json > "$RES/$shape.$qt.mlxcel.json" 2> "$LOG/$shape.$qt.bench.log"
    tail -3 "$LOG/$shape.$qt.bench.log"
    ab_decode "$qdir" "$shape" "$qt " ${QUANT_AB_ENV:-}
    if [ "${AB_QMV_TC:-0}" = 1 ]; then
      stage "$shape $qt: decode with MLXCEL_QMV_TC=0 (A/B: CUDA-core qmv + qmm, batch $BATCH)"
      MLXCEL_QMV_TC=0 timeout "$(tl)" "$MLX" bench -m "$qdir" --device cuda --prompt-tokens "$PROMPT" \
        --gen-tokens "$GEN" --batch "$BATCH" --repeat 1 2> "$LOG/$shape.$qt.bench_notc.log" | tail -4
    fi
    timeout "$(tl)" "$MLX" bench -m "$qdir" --device cuda --prompt-tokens "$PREFILL_LONG" --gen-tokens 2 \
      --batch 1 --repeat "$REPEAT" --json > "$RES/$shape.$qt.mlxcel_long.json" 2> "$LOG/$shape.$qt.bench_long.log"
    stage "$shape $qt: mlxcel compare vs bf16 (256 tokens)"
    timeout "$(tl)" "$MLX" compare -m "$qdir" --ref "$dir" --prompt-ids "$ids" -n 256 --device cuda \
      --json > "$RES/$shape.$qt.compare.json" 2> "$LOG/$shape.$qt.compare.log"
    cat "$RES/$shape.$qt.compare.json"
    NCUQ=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ "${PROFILE:-0}" = 1 ] && [ -n "$NCUQ" ] && [ "$(left)" -gt 120 ]; then
      stage "$shape $qt: ncu kernel times (decode B=1)"
      timeout 60 "$NCUQ" --clock-control none --metrics gpu__time_duration.sum --csv "$MLX" generate \
        -m "$qdir" --device cuda --prompt-ids "$ids" -n 4 --temp 0 --ignore-eos > "$LOG/$shape.$qt.ncu1.csv" 2>/dev/null
      "$PY" bench/ncu_summary.py "$LOG/$shape.$qt.ncu1.csv" | tee "$RES/$shape.$qt.ncu_b1.txt" | head -14
    fi
    [ "${KEEP:-0}" = 1 ] || rm -rf "$qdir"
    echo "$shape $qt" >> "$RES/quant.list"
  done
  if [ "${SKIP_HF:-0}" != 1 ] && [ "$(left)" -gt 60 ]; then
    stage "$shape: transformers generate() + agreement"
    hf_timing=""; [ "${HF_TIMING:-1}" = 0 ] && hf_timing="--no-timing"
    timeout "$(tl)" "$PY" tools/reference/transformers_bench.py "$dir" $hf_timing --prompt-tokens "$PROMPT" \
      --gen-tokens "$GEN" --batch "$BATCH" --agree "$RES/$shape.generate.json" --out "$RES/$shape.hf.json" ${HF_AGREE_EXTRA:---self-agree 256 --fp32-agree} \
      > "$LOG/$shape.hf.log" 2>&1; tail -5 "$LOG/$shape.hf.log"
    if [ "$(left)" -gt 40 ] && [ "${HF_TIMING:-1}" != 0 ]; then
      timeout "$(tl)" "$PY" tools/reference/transformers_bench.py "$dir" --prompt-tokens "$PREFILL_LONG" \
        --gen-tokens 2 --batch 1 --out "$RES/$shape.hf_long.json" > "$LOG/$shape.hf_long.log" 2>&1
    fi
  fi
  if [ "${PROFILE:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -n "$NCU" ]; then
      itl() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); r=[x for x in d['results'] if x['batch']==int(sys.argv[2])]; print(r[0]['itl_ms_p50'] if r else 0)" "$RES/$shape.mlxcel.json" "$1" 2>/dev/null || echo 0; }
      ids2k=$("$PY" -c "import random; r=random.Random(9); print(','.join(str(r.randrange(1000, 100000)) for _ in range($PREFILL_LONG)))")
      stage "$shape: ncu kernel times (decode B=1, prefill $PREFILL_LONG, decode B=32)"
      NCUF="--clock-control none --metrics gpu__time_duration.sum --csv"
      timeout 90 "$NCU" $NCUF "$MLX" generate -m "$dir" --device cuda --prompt-ids "$ids" -n 4 --temp 0 \
        --ignore-eos > "$LOG/$shape.ncu1.csv" 2> "$LOG/$shape.ncu1.err"
      "$PY" bench/ncu_summary.py "$LOG/$shape.ncu1.csv" "$(itl 1)" | tee "$RES/$shape.ncu_b1.txt" | head -20
      timeout 90 "$NCU" $NCUF "$MLX" generate -m "$dir" --device cuda --prompt-ids "$ids2k" -n 2 --temp 0 \
        --ignore-eos > "$LOG/$shape.ncu2.csv" 2> "$LOG/$shape.ncu2.err"
      "$PY" bench/ncu_summary.py "$LOG/$shape.ncu2.csv" | tee "$RES/$shape.ncu_prefill.txt" | sed -n '/every forward/,$p' | head -16
      timeout 120 "$NCU" $NCUF "$MLX" bench -m "$dir" --device cuda --prompt-tokens 32 --gen-tokens 3 \
        --batch 32 --repeat 1 > "$LOG/$shape.ncu3.csv" 2> "$LOG/$shape.ncu3.err"
      "$PY" bench/ncu_summary.py "$LOG/$shape.ncu3.csv" "$(itl 32)" | tee "$RES/$shape.ncu_b32.txt" | head -18
    else
      echo "ncu not found"
    fi
  fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
done

# ==== Results ====
stage "results"
BASE="$DATE-$COMMIT-$TAG"
"$PY" bench/summarize.py "$RES" "$OUT/$BASE" "$DATE" "$COMMIT" "$LOG/nvidia-smi.csv" "$TESTS" "$SHAPES"
tar czf "$OUT/logs-$TAG.tgz" -C "$WORK" logs res 2>/dev/null
mkdir -p bench/results && cp "$OUT/$BASE".* bench/results/ 2>/dev/null
echo "== done in $((SECONDS - T0)) s: $OUT/$BASE.{md,json}, $OUT/logs-$TAG.tgz"
# TP=1: tensor parallelism checks after the rest (bench/tp_device.sh; with KEEP=1 it reuses the
# 8B checkpoint), within what is left of BUDGET
if [ "${TP:-0}" = 1 ]; then
  BUDGET=$(left) WORK=$WORK OUT=$OUT PYTHON=$PY bash bench/tp_device.sh
fi
