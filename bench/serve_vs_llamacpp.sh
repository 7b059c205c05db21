#!/usr/bin/env bash
# mlxcel serve vs llama.cpp's llama-server (issue #51): the same synthetic Llama-3.1-8B bf16
# weights (safetensors for mlxcel, their GGUF conversion for llama-server), the same card,
# the same `mlxcel loadtest` (token-id prompts, ignore_eos, one seed: identical work for
# both) at 64, 256 and 512 streams, for fixed 512/128 lengths and a ShareGPT-like law. One
# table: output tok/s of each and the ratio, TTFT and ITL p50/p99, failures by cause, and from
# /metrics the time per step, rows per step and whether each server held nothing afterwards.
#
#   here:        LLAMA=1 XZ=1 bash bench/pack_device.sh   # .carry/devpack.tar.xz + .carry/llama/
#   GPU machine, carry [".carry/devpack.tar.xz", ".carry/llama"]:
#     call 1:    bash bench/serve_vs_llamacpp.sh prep      # ~5 min: llama-server (CUDA) built in the
#                                                          # background, checkpoint, GGUF, smoke run
#     call 2:    WORKLOADS=fixed bash bench/serve_vs_llamacpp.sh run   # both servers, ~6-8 min
#     call 3:    WORKLOADS=dist bash bench/serve_vs_llamacpp.sh run    # both servers, ~6-8 min
#   (calls 2 and 3 need call 1's $WORK: the same warm machine; `all` does the three in one go
#   where the budget allows, e.g. BUDGET=1500 outside the 10-minute call limit)
#
# llama-server settings (tools/server and src/ of the llama.cpp in node-llama-cpp@3.21.1):
#   -np N -c N*CTX   -c is the TOTAL KV of all slots: each slot gets n_ctx/np rounded UP to a
#                    multiple of 256 (src/llama-context.cpp, n_ctx_seq = GGML_PAD(n_ctx /
#                    n_seq_max, 256)), and GET /v1/models meta.n_ctx reports that per-slot
#                    context (loadtest refuses a run whose longest P + G exceeds it).
#                    mlxcel's -c is per sequence. `-np 256 -c 768` gives llama-server slots of
#                    256 tokens, too few for 512 + 128.
#   -np <= 256       LLAMA_MAX_SEQ (src/llama-cparams.h): at 512 streams llama-server runs 256
#                    slots and queues the rest (requests_deferred); mlxcel runs 512 where the
#                    KV fits (MLX_NP) and likewise queues beyond its slots.
#   (no -kvu)        with -np given the KV is split per slot (the "high-throughput" layout); a
#                    unified pool (-kvu) smaller than np x (P + G) runs out mid-decode, and then
#                    every slot in the batch gets "Context size has been exceeded." as a
#                    mid-stream error event (server-context.cpp), with no [DONE].
#   -cb              continuous batching (its default; named for the record)
#   -fa on -ngl all  flash attention, every layer on the GPU
#   -b 2048 -ub 2048 the same logical/physical batch as mlxcel's -b/-ub
#   -cram 0          no host-RAM prompt cache: loadtest's prompts never share a prefix, so
#                    saving each finished slot's KV to host memory could only cost
#   -fit off         keep -c/-np as given (fit would shrink unset values to the card)
#   --metrics        /metrics for loadtest's server breakdown
#
# Environment: WORK=/tmp/mlxcel-vs OUT=/tmp/mlxcel-out BUDGET=560 (seconds of this call)
#   LEVELS=64,256,512 WORKLOADS="fixed dist" PROMPT=512 GEN=128 SEED=51
#   DIST_PROMPT=lognormal:161,1.0,4,512 DIST_GEN=lognormal:338,0.8,4,512 (the sharegpt preset's
#     means and spreads, clamped to 512 + 512 so 256 slots of KV fit beside the weights on an H100)
#   REQ_FACTOR=1 (measured requests per level = streams x REQ_FACTOR, after one wave of warm-up)
#   MLX_NP (default: 512 where 512 x CTX of KV fits, else 256)  LLAMA_NP=256
#   LLAMA_BUNDLE=.carry/llama/gitRelease.bundle  LLAMA_SERVER (a built binary: skips the build)
#   For a rehearsal on the CPU: DEVICE=cpu MLXCEL=build-cpu/mlxcel MODEL_DIR=models/wordnet-chat-16m
#   GGUF=<its conversion> LLAMA_SERVER=<a CPU build> with small LEVELS/PROMPT/GEN/DIST_* (run only).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PHASE=${1:-all}
T0=$SECONDS
BUDGET=${BUDGET:-560}
WORK=${WORK:-/tmp/mlxcel-vs}
OUT=${OUT:-/tmp/mlxcel-out}
SHAPE=${SHAPE:-llama-3.1-8b}
LEVELS=${LEVELS:-64,256,512}
WORKLOADS=${WORKLOADS:-"fixed dist"}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
DIST_PROMPT=${DIST_PROMPT:-lognormal:161,1.0,4,512}
DIST_GEN=${DIST_GEN:-lognormal:338,0.8,4,512}
REQ_FACTOR=${REQ_FACTOR:-1}
LLAMA_NP=${LLAMA_NP:-256}
SEED=${SEED:-51}
PY=${PYTHON:-python3}
LLAMA_BUNDLE=${LLAMA_BUNDLE:-.carry/llama/gitRelease.bundle}
DIR=${MODEL_DIR:-$WORK/$SHAPE}
GGUF=${GGUF:-$WORK/$SHAPE-bf16.gguf}
DEVICE=${DEVICE:-cuda}
LSRC=$WORK/llama.cpp
LBIN=${LLAMA_SERVER:-$LSRC/build/bin/llama-server}
LOG=$WORK/logs
RES=$WORK/res
mkdir -p "$LOG" "$RES" "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n 4096 2>/dev/null # 512 streams: a socket each, both ends
. bench/device_env.sh # left stage tl device_libs runnable device_build
exec > >(tee -a "$LOG/serve_vs.log") 2>&1
[ -d .carry/dev ] || { [ -e .carry/devpack.tar.xz ] && tar xJf .carry/devpack.tar.xz -C .carry; }
device_libs
MLX=${MLXCEL:-.carry/dev/mlxcel}
if ! runnable "$MLX"; then
  stage "carried mlxcel missing or not loadable: building it here"
  device_build mlxcel && MLX=build-dev/mlxcel || { echo "FATAL: no mlxcel (bench/pack_device.sh)"; exit 2; }
fi
get() { "$PY" -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())" "$1"; }
status_of() { "$PY" -c "
import sys,urllib.request,urllib.error
try: print(urllib.request.urlopen(sys.argv[1], timeout=5).status)
except urllib.error.HTTPError as e: print(e.code)
except Exception: print(0)" "$1"; }

# ==== prep: llama-server (background build), checkpoint, GGUF ====
build_llama() {
  if [ -x "$LBIN" ]; then echo "llama-server: $LBIN (built before)"; return 0; fi
  if [ ! -d "$LSRC/.git" ]; then
    [ -e "$LLAMA_BUNDLE" ] || { echo "no $LLAMA_BUNDLE (LLAMA=1 bash bench/pack_device.sh packs it)"; return 1; }
    git clone -q "$LLAMA_BUNDLE" "$LSRC" || return 1
  fi
  # the server only; no web UI download (the machine has no network), no TLS
  cmake -S "$LSRC" -B "$LSRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF > "$LOG/llama_cmake.log" 2>&1 &&
    cmake --build "$LSRC/build" --target llama-server -j "$(nproc)" > "$LOG/llama_build.log" 2>&1
}

prep() {
  stage "prep: llama.cpp $(git -C "$LSRC" rev-parse --short HEAD 2>/dev/null || echo '(to clone)') build in the background"
  build_llama & BPID=$!
  if [ ! -e "$DIR/config.json" ]; then
    stage "synthetic $SHAPE checkpoint"
    timeout "$(tl)" "$PY" tools/reference/make_synthetic.py "$DIR" --shape "$SHAPE" > "$LOG/synth.log" 2>&1 ||
      { tail -5 "$LOG/synth.log"; return 1; }
  fi
  if [ ! -e "$DIR/tokenizer.json" ]; then # the synthetic shapes have none: Llama 3's (pack_device.sh)
    tmp=$(mktemp -d)
    if [ -e .carry/dev/tokenizer-llama3.tgz ]; then tar xzf .carry/dev/tokenizer-llama3.tgz -C "$tmp"
    else cp tests/fixtures/tokenizers/npm/llama3/tokenizer.json tests/fixtures/tokenizers/npm/llama3/tokenizer_config.json "$tmp/" 2>/dev/null
    fi
    cp "$tmp/tokenizer.json" "$tmp/tokenizer_config.json" "$DIR/" || { echo "no Llama 3 tokenizer (bench/pack_device.sh packs it)"; return 1; }
    rm -rf "$tmp"
  fi
  while [ ! -e "$LSRC/convert_hf_to_gguf.py" ] && kill -0 "$BPID" 2>/dev/null; do sleep 1; done # the clone
  if [ ! -s "$GGUF" ]; then
    stage "GGUF: convert_hf_to_gguf.py --outtype bf16"
    PYTHONPATH=$LSRC/gguf-py timeout "$(tl)" "$PY" "$LSRC/convert_hf_to_gguf.py" "$DIR" --outtype bf16 \
      --outfile "$GGUF.tmp" > "$LOG/convert.log" 2>&1 && mv "$GGUF.tmp" "$GGUF" || { tail -15 "$LOG/convert.log"; return 1; }
  fi
  stage "waiting for the llama-server build"
  while kill -0 "$BPID" 2>/dev/null; do
    if [ "$(left)" -lt 90 ]; then # the build resumes where it stopped: run prep again
      echo "llama-server still building ($(tail -1 "$LOG/llama_build.log" | cut -c1-60)); run prep again"
      return 1
    fi
    sleep 2
  done
  wait "$BPID" || { tail -30 "$LOG/llama_build.log" "$LOG/llama_cmake.log" 2>/dev/null; return 1; }
  "$LBIN" --version 2>&1 | tail -2
  ls -la "$GGUF"
  stage "smoke: both servers, 8 streams, 64 + 16 tokens"
  LEVELS=8 REQ_FACTOR=1 WL_LEFT=1 run_workload smoke 64 16 64 16 8 || return 1
  "$PY" bench/serve_vs_table.py "$RES" | grep -E "^\| smoke|^\| workload"
}

# ==== Servers ====
SPID=
stop_server() {
  [ -n "$SPID" ] || return 0
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 150); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SPID" 2>/dev/null && { echo "server still up 15 s after SIGTERM: SIGKILL"; kill -KILL "$SPID"; }
  wait "$SPID" 2>/dev/null
  SPID=
}
trap stop_server EXIT
trap 'exit 143' TERM INT

# start_server mlxcel|llama NAME CTX NP : sets URL; logs $LOG/NAME.log
start_server() {
  local srv=$1 name=$2 ctx=$3 np=$4 port_file=$WORK/port.$$
  rm -f "$port_file"
  if [ "$srv" = mlxcel ]; then
    FLAGS="-np $np --max-batch-size $np -c $ctx -b 2048 -ub 2048 --prefill-chunk-size 512 --max-queue-depth 0 --metrics"
    # every stream comes from 127.0.0.1: where the server limits connections per address
    # (default half of --threads-http), 512 streams + /metrics must fit
    "$MLX" serve --help 2>&1 | grep -q -- --max-connections-per-ip && FLAGS="$FLAGS --max-connections-per-ip 1024"
    "$MLX" serve -m "$DIR" -a "$SHAPE" --device "$DEVICE" --host 127.0.0.1 --port 0 --port-file "$port_file" $FLAGS \
      > "$LOG/$name.log" 2>&1 &
    SPID=$!
    while [ ! -s "$port_file" ]; do
      kill -0 "$SPID" 2>/dev/null || { echo "mlxcel serve exited:"; tail -20 "$LOG/$name.log"; return 1; }
      [ "$(left)" -lt 20 ] && { echo "mlxcel serve not up: budget"; return 1; }
      sleep 0.5
    done
    URL=http://127.0.0.1:$(cat "$port_file")
  else
    local port=$((20000 + RANDOM % 20000))
    FLAGS="-np $np -c $((np * ctx)) -cb -fa on -ngl $([ "$DEVICE" = cuda ] && echo all || echo 0) -b 2048 -ub 2048 -cram 0 -fit off --metrics --no-webui"
    "$LBIN" -m "$GGUF" -a "$SHAPE" --host 127.0.0.1 --port "$port" $FLAGS > "$LOG/$name.log" 2>&1 &
    SPID=$!
    URL=http://127.0.0.1:$port
    while [ "$(status_of "$URL/health")" != 200 ]; do # 503 while loading
      kill -0 "$SPID" 2>/dev/null || { echo "llama-server exited:"; tail -20 "$LOG/$name.log"; return 1; }
      [ "$(left)" -lt 20 ] && { echo "llama-server not up: budget"; return 1; }
      sleep 0.5
    done
  fi
  rm -f "$port_file"
  echo "   $srv $FLAGS: per-slot context $(get "$URL/v1/models" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0].get("meta",{}).get("n_ctx"))')"
}

# run_workload NAME PLAW GLAW PMAX GMAX [MLX_NP]: both servers, every level of LEVELS.
run_workload() {
  local wl=$1 plaw=$2 glaw=$3 pmax=$4 gmax=$5 ctx np_m kvtok wbytes mem maxc levels c srv tl rem
  ctx=$(( (pmax + gmax + 15) / 16 * 16 ))
  levels=$(echo "$LEVELS" | tr ',' ' ')
  local tot=0; for c in $levels; do tot=$((tot + c)); done
  maxc=$(echo "$levels" | tr ' ' '\n' | sort -n | tail -1)
  np_m=${6:-${MLX_NP:-}}
  if [ -z "$np_m" ]; then # 512 slots where their KV fits beside the weights (8 GiB kept free)
    kvtok=$("$PY" -c "import json;c=json.load(open('$DIR/config.json'));print(c['num_hidden_layers']*c['num_key_value_heads']*c.get('head_dim',c['hidden_size']//c['num_attention_heads'])*4)")
    wbytes=$(du -cb "$DIR"/*.safetensors | tail -1 | cut -f1)
    mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
    np_m=256
    [ -n "$mem" ] && [ $((wbytes + 512 * ctx * kvtok + (8 << 30))) -le $((mem << 20)) ] && np_m=512
    [ "$maxc" -lt "$np_m" ] && np_m=$maxc
  fi
  local np_l=$((maxc < LLAMA_NP ? maxc : LLAMA_NP))
  "$PY" - "$RES/run.json" "$wl" "mlxcel serve -np $np_m --max-batch-size $np_m -c $ctx -b 2048 -ub 2048 --prefill-chunk-size 512 --max-queue-depth 0" \
    "llama-server -np $np_l -c $((np_l * ctx)) -cb -fa on -ngl $([ "$DEVICE" = cuda ] && echo all || echo 0) -b 2048 -ub 2048 -cram 0 -fit off" "$plaw" "$glaw" <<'PY'
import json, os, sys
p, wl, fm, fl, pl, gl = sys.argv[1:]
d = json.load(open(p)) if os.path.exists(p) else {}
d.setdefault("mlxcel_flags", {})[wl] = fm
d.setdefault("llama_flags", {})[wl] = fl
d.setdefault("laws", {})[wl] = {"prompt": pl, "gen": gl}
json.dump(d, open(p, "w"), indent=1)
PY
  for srv in mlxcel llama; do
    [ "$(left)" -lt 40 ] && { stage "SKIP $wl $srv: budget left $(left) s"; continue; }
    stage "$wl: $srv (prompt $plaw, output $glaw, levels $LEVELS)"
    start_server "$srv" "$wl-$srv" "$ctx" "$([ $srv = mlxcel ] && echo $np_m || echo $np_l)" || { stop_server; continue; }
    for c in $levels; do
      # This level's share of the time left, by streams x server weight (llama-server counted
      # 1.5x: slower), with what the other server and later workloads still need.
      rem=0; for x in $levels; do [ "$x" -ge "$c" ] && rem=$((rem + x * $([ $srv = mlxcel ] && echo 2 || echo 3))); done
      [ "$srv" = mlxcel ] && rem=$((rem + 3 * tot))
      rem=$((rem + (${WL_LEFT:-1} - 1) * 5 * tot))
      tl=$(( ($(left) - 30) * c * $([ $srv = mlxcel ] && echo 2 || echo 3) / rem )); [ "$tl" -lt 15 ] && tl=15
      [ "$(left)" -lt 30 ] && { stage "SKIP $wl $srv c=$c: budget"; continue; }
      timeout $((tl + 120)) "$MLX" loadtest --url "$URL" --concurrency "$c" --warmup "$c" --requests $((c * REQ_FACTOR)) \
        --prompt-tokens-dist "$plaw" --gen-tokens-dist "$glaw" --seed "$SEED" --stream --json --timeout 600 \
        --time-limit "$tl" --metrics-interval 1 > "$RES/$wl-$srv-c$c.json" 2> "$LOG/$wl-$srv-c$c.err"
      echo "   c=$c: exit $?, $("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(f\"{r['output_tokens_per_s']:.0f} tok/s, failures {r['failures']}\", ('truncated' if r.get('truncated') else ''))" "$RES/$wl-$srv-c$c.json" 2>/dev/null || tail -2 "$LOG/$wl-$srv-c$c.err")"
    done
    get "$URL/metrics" > "$LOG/$wl-$srv.metrics.txt" 2>/dev/null
    stop_server
  done
}

law_max() { echo "${1##*,}"; } # the clamp MAX of lognormal:M,S,MIN,MAX / uniform:A,B; N for fixed

run() {
  [ -s "$GGUF" ] && [ -x "$LBIN" ] && [ -e "$DIR/tokenizer.json" ] ||
    { echo "run needs prep's outputs in $WORK (bash bench/serve_vs_llamacpp.sh prep on this machine)"; return 1; }
  "$PY" - "$RES/run.json" "$(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1 || true)${DEVICE/cuda/}" \
    "$(cat .carry/dev/COMMIT 2>/dev/null || git rev-parse --short HEAD)" "$(git -C "$LSRC" rev-parse --short HEAD)" <<'PY'
import json, os, sys, time
p, card, mc, lc = sys.argv[1:]
d = json.load(open(p)) if os.path.exists(p) else {}
d.update(card=card, mlxcel_commit=mc, llama_commit=lc, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
json.dump(d, open(p, "w"), indent=1)
PY
  WL_LEFT=$(echo $WORKLOADS | wc -w)
  for wl in $WORKLOADS; do
    case $wl in
      fixed) run_workload fixed "$PROMPT" "$GEN" "$PROMPT" "$GEN" ;;
      dist) run_workload dist "$DIST_PROMPT" "$DIST_GEN" "$(law_max "$DIST_PROMPT")" "$(law_max "$DIST_GEN")" ;;
      *) echo "unknown workload $wl (fixed, dist)" ;;
    esac
    WL_LEFT=$((WL_LEFT - 1))
  done
}

case $PHASE in
  prep) prep ;;
  run) run ;;
  all) prep && run ;;
  table) ;;
  *) echo "usage: bash bench/serve_vs_llamacpp.sh [prep|run|all|table]"; exit 2 ;;
esac
rc=$?
stop_server
TAG=$(date -u +%Y-%m-%d)-$(cat .carry/dev/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)-serve-vs-llamacpp
stage "table ($RES)"
"$PY" bench/serve_vs_table.py "$RES" --md "$OUT/$TAG.md" --json "$OUT/$TAG.json"
tar czf "$OUT/logs-serve-vs.tgz" -C "$WORK" logs 2>/dev/null
exit $rc
