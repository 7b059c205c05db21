#!/usr/bin/env bash
# Autotune on the GPU machine (issue 9's closing check), one call:
#   1. `mlxcel tune --device cuda --op paged-decode-splits` with the Llama-3.1-8B geometry
#      (head_dim 128, 32 q heads, 8 kv heads, block 16) over the full default matrix
#      (batch 1,2,4,8 x context 1024,4096,16384) into a fresh MLXCEL_CACHE_DIR: default vs
#      selected us per cell;
#   2. `mlxcel bench` on a synthetic Llama-3.1-8B (bf16) at 16384 prompt tokens + 32 generated,
#      B=1 and B=8, with MLXCEL_AUTOTUNE unset and =cache (same cache dir), in this run:
#      the end-to-end change.
#
#   here:        bash bench/pack_device.sh                 # builds + packs .carry/dev
#   GPU machine: bash bench/tune_device.sh                 # carry: .carry/dev
#
# Environment (defaults): OUT=/tmp/mlxcel-out  WORK=/tmp/mlxcel-tune  BUDGET=540 (seconds)
#   PROMPT=16384 GEN=32 BATCH=1,8 REPEAT=1 ROUNDS=1 (2: unset, cache, cache, unset: cancels
#   linear drift)  BENCH_TIMEOUT=150 (per bench call). One bench call per (batch, mode); each
#   pays the model load and a warm-up run with the full prompt (B=8: 2 x 131k prefill tokens),
#   so the stage is ~4 calls x (load + 2 prefills); the printed times say what it took.
#   SKIP_BENCH=0  KEEP=0 (1: keep the checkpoint in $WORK for the next call)
#   QTUNE=0 (1: also `mlxcel tune --op qmv-multirow --op qmm-tile` on the 4-bit Llama-3.1-8B
#   MLP up projection [14336, 4096], group 64: qmv at batch 1,2,4,8, qmm at QCTX=1024,4096
#   prefill rows, QSAMPLE_MS=100 per candidate sample; about half a minute. The bench model is
#   bf16, so these winners do not change step 2: the table shows default vs selected us.)
# Output ($OUT): tune-<date>-<commit>.md (all tables), tune.json, tune-q.json, bench-*.json,
#   logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$SECONDS
OUT=${OUT:-/tmp/mlxcel-out}
WORK=${WORK:-/tmp/mlxcel-tune}
BUDGET=${BUDGET:-540}
PROMPT=${PROMPT:-16384}
GEN=${GEN:-32}
BATCH=${BATCH:-1,8}
REPEAT=${REPEAT:-1}
ROUNDS=${ROUNDS:-1}
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK/logs"
LOG=$WORK/logs
COMMIT=${COMMIT:-$(cat .carry/dev/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
DATE=$(date -u +%Y-%m-%d)
. bench/device_env.sh # left stage tl, device_libs, runnable, device_build
exec > >(tee -a "$LOG/run.log") 2>&1

# ==== Binaries (as bench/run_device.sh) ====
stage "tune_device.sh $DATE commit $COMMIT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv 2>&1 | tee "$LOG/nvidia-smi.csv"
device_libs
MLX=.carry/dev/mlxcel
if ! runnable "$MLX"; then
  stage "carried mlxcel missing or not loadable; building here"
  if device_build mlxcel; then
    MLX=build-dev/mlxcel
  else
    echo "FATAL: no runnable mlxcel"; exit 2
  fi
fi

# ==== 1. The tuner: full default matrix, Llama-3.1-8B geometry, fresh cache ====
export MLXCEL_CACHE_DIR=$WORK/cache
rm -rf "$MLXCEL_CACHE_DIR"
unset MLXCEL_AUTOTUNE MLXCEL_PAGED_DECODE_SPLITS MLXCEL_SDPA_DETERMINISTIC
stage "mlxcel tune --device cuda --op paged-decode-splits (Llama-3.1-8B geometry, 12 cells)"
t=$SECONDS
timeout "$(tl)" "$MLX" tune --device cuda --op paged-decode-splits --head-dim 128 --q-heads 32 \
  --kv-heads 8 --block-size 16 --batch-sizes 1,2,4,8 --context-lengths 1024,4096,16384 --json \
  > "$WORK/tune.json" 2> "$LOG/tune.log"
echo "tune rc=$? in $((SECONDS - t)) s; $(ls "$MLXCEL_CACHE_DIR/autotune" 2>/dev/null | wc -l) records"
grep -iE "warn|error|rejected" "$LOG/tune.log" | head -10
cp "$WORK/tune.json" "$OUT/tune.json" 2>/dev/null

# ==== 1b. Optional: the quantized kernels (4-bit Llama-3.1-8B up projection) ====
QJSON=""
if [ "${QTUNE:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
  unset MLXCEL_QMV_MULTIROW MLXCEL_QMM_TILE_M
  stage "mlxcel tune --device cuda --op qmv-multirow --op qmm-tile (n14336.k4096.q4g64)"
  t=$SECONDS
  timeout "$(tl)" "$MLX" tune --device cuda --op qmv-multirow --op qmm-tile \
    --batch-sizes 1,2,4,8 --context-lengths "${QCTX:-1024,4096}" \
    --sample-ms "${QSAMPLE_MS:-100}" --json > "$WORK/tune-q.json" 2> "$LOG/tune-q.log"
  echo "tune (quantized) rc=$? in $((SECONDS - t)) s"
  grep -iE "warn|error|rejected|mismatch" "$LOG/tune-q.log" | head -10
  cp "$WORK/tune-q.json" "$OUT/tune-q.json" 2>/dev/null && QJSON=$WORK/tune-q.json
fi

# ==== 2. End to end: bench with MLXCEL_AUTOTUNE unset vs cache, same run ====
MODEL=$WORK/llama-3.1-8b
BENCH_RUNS=""
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if [ ! -e "$MODEL/config.json" ] && [ "$(left)" -gt 150 ]; then
    stage "synthetic Llama-3.1-8B checkpoint (bf16, 16 GB)"
    t=$SECONDS
    timeout "$(tl)" "$PY" tools/reference/make_synthetic.py "$MODEL" --shape llama-3.1-8b \
      > "$LOG/synth.log" 2>&1 || { tail -5 "$LOG/synth.log"; rm -rf "$MODEL"; }
    echo "checkpoint in $((SECONDS - t)) s"
  fi
  order="unset cache"
  [ "$ROUNDS" = 2 ] && order="unset cache cache unset"
  # one bench call per (batch, mode), the two modes back to back: a batch that runs out of
  # time still leaves the other's comparison (each call pays a warm-up run + the model load)
  i=0
  for b in ${BATCH//,/ }; do
    for mode in $order; do
      i=$((i + 1))
      if [ ! -e "$MODEL/config.json" ]; then stage "SKIP bench: no checkpoint"; break 2; fi
      if [ "$(left)" -lt 40 ]; then stage "SKIP bench $i (B=$b, $mode): budget left $(left) s"; continue; fi
      stage "bench $i: B=$b MLXCEL_AUTOTUNE=$mode, prompt $PROMPT, gen $GEN, repeat $REPEAT"
      t=$SECONDS
      if [ "$mode" = cache ]; then export MLXCEL_AUTOTUNE=cache; else unset MLXCEL_AUTOTUNE; fi
      lim=$(tl); [ "$lim" -gt "${BENCH_TIMEOUT:-150}" ] && lim=${BENCH_TIMEOUT:-150}
      timeout "$lim" "$MLX" bench -m "$MODEL" --device cuda --prompt-tokens "$PROMPT" \
        --gen-tokens "$GEN" --batch "$b" --repeat "$REPEAT" --json \
        > "$WORK/bench-$i-$mode.json" 2> "$LOG/bench-$i-$mode.log"
      echo "bench rc=$? in $((SECONDS - t)) s"
      grep -E "^device:|^model loaded|autotune" "$LOG/bench-$i-$mode.log" | head -8
      BENCH_RUNS="$BENCH_RUNS $WORK/bench-$i-$mode.json"
      cp "$WORK/bench-$i-$mode.json" "$OUT/" 2>/dev/null
    done
  done
  unset MLXCEL_AUTOTUNE
  [ "${KEEP:-0}" = 1 ] || rm -rf "$MODEL"
fi

# ==== Tables ====
stage "results"
MD="$OUT/tune-$DATE-$COMMIT.md"
QJSON=$QJSON "$PY" - "$WORK/tune.json" "$MD" "$DATE" "$COMMIT" $BENCH_RUNS <<'PY'
import json, os, sys
tune_path, md_path, date, commit, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
lines = [f"# mlxcel tune on CUDA, {date}, commit {commit}", ""]

def measured(r):
    """(default us, selected us, candidates (us)) cells of one tune result; the last one
    names the candidates whose output did not match the default's."""
    cands = r["candidates_measured"]
    d = next(c for c in cands if c["value"] == r["default"])
    s = next(c for c in cands if c["value"] == r["selected"])
    bad = [str(c["value"]) for c in cands if not c["checked"]]
    cs = " ".join(f"{c['value']}:{c['median_us']:.1f}" for c in cands)
    return (f"{d['median_us']:.1f} +-{d['spread_us']:.1f}", f"{s['median_us']:.1f} +-{s['spread_us']:.1f}",
            cs + (f" (output mismatch: {','.join(bad)})" if bad else ""))

try:
    t = json.load(open(tune_path))
except Exception as e:
    t = None
    lines.append(f"tune: no JSON ({e})")
if t:
    lines += [f"device `{t['device']['id']}`; geometry head_dim {t['geometry']['head_dim']}, "
              f"{t['geometry']['q_heads']} q heads, {t['geometry']['kv_heads']} kv heads, "
              f"block {t['geometry']['block_size']}; failed points: {t.get('failed')}", "",
              "| batch | context | default | default us | selected | selected us | speedup | candidates (us) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in t.get("results", []):
        du, su, cs = measured(r)
        lines.append(f"| {r['batch']} | {r['context']} | {r['default']} | {du} | {r['selected']} | "
                     f"{su} | {r['speedup']:.3f}x | {cs} |")
qpath = os.environ.get("QJSON")
if qpath:
    try:
        q = json.load(open(qpath))
    except Exception as e:
        q = None
        lines += ["", f"tune (quantized): no JSON ({e})"]
    if q:
        g = q["geometry"]
        lines += ["", f"Quantized kernels, weight [{g['intermediate']}, {g['hidden']}] "
                  f"{g['q_bits']}-bit group {g['q_group']} (0 = the kernel's own default); "
                  f"failed points: {q.get('failed')}", "",
                  "| op | bucket | default us | selected | selected us | speedup | candidates (us) |",
                  "|---|---|---|---|---|---|---|"]
        for r in q.get("results", []):
            du, su, cs = measured(r)
            lines.append(f"| {r['op']} | {r['bucket']} | {du} | {r['selected']} | {su} | "
                         f"{r['speedup']:.3f}x | {cs} |")
bench = {}
for p in runs:
    mode = os.path.basename(p).split("-", 2)[2].rsplit(".", 1)[0]
    try:
        j = json.load(open(p))
    except Exception:
        continue
    for r in j["results"]:
        bench.setdefault((r["batch"], mode), []).append(r)
if bench:
    med = lambda xs: sorted(xs)[len(xs) // 2] if len(xs) % 2 else sum(sorted(xs)[len(xs) // 2 - 1:len(xs) // 2 + 1]) / 2
    lines += ["", "End to end (`mlxcel bench`, synthetic Llama-3.1-8B bf16, same run; median over "
              "bench calls):", "",
              "| B | decode tok/s unset | decode tok/s cache | change | ITL p50 ms unset / cache | prefill tok/s unset / cache |",
              "|---|---|---|---|---|---|"]
    for b in sorted({k[0] for k in bench}):
        u, c = bench.get((b, "unset"), []), bench.get((b, "cache"), [])
        if not u or not c:
            continue
        du, dc = med([x["decode_tok_s"] for x in u]), med([x["decode_tok_s"] for x in c])
        lines.append(f"| {b} | {du:.1f} | {dc:.1f} | {100 * (dc / du - 1):+.1f}% | "
                     f"{med([x['itl_ms_p50'] for x in u]):.2f} / {med([x['itl_ms_p50'] for x in c]):.2f} | "
                     f"{med([x['prefill_tok_s'] for x in u]):.0f} / {med([x['prefill_tok_s'] for x in c]):.0f} |")
text = "\n".join(lines) + "\n"
open(md_path, "w").write(text)
print(text)
PY
tar czf "$OUT/logs-tune.tgz" -C "$WORK" logs 2>/dev/null
echo "== done in $((SECONDS - T0)) s: $MD"
