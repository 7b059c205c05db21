#!/usr/bin/env bash
# GPU machine: where the time of one decode step goes. Runs `mlxcel generate` on dummy weights
# of SHAPES (make_synthetic.py --config-only) under Nsight Compute with only the kernel
# duration metric, skipping the prefill and the first steps, and prints per kernel name the
# launches and microseconds per step (steps counted by the argmax kernel), then the wall-clock
# step time of the same command without the profiler: the gap is launch and dependency time.
# Carry .carry/devpack.tar.xz. Output: $OUT/diag/step_*.csv. MODELS="DIR ..." instead of
# SHAPES: checkpoints on disk (quantized ones, say), loaded as they are.
#   SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_GEMV_FUSE=1" bash tools/diag/step_ncu.sh
#   MODELS=/tmp/mlxcel-dev/llama-3.1-8b-q4g64 bash tools/diag/step_ncu.sh
set -u
. bench/device_env.sh
diag_init
M=.carry/dev/mlxcel
one() { # shape, config dir, environment, A/B entry
  local s=$1 C=$2 e=$3 ab=$4
  tag=$(basename "$s")${ab//[^A-Za-z0-9]/_}
  local lf=(--load-format dummy)
  [ -n "${MODELS:-}" ] && lf=()
  gen=("$M" generate -m "$C" "${lf[@]}" --ignore-eos --device cuda --json
       --prompt-ids "$(seq -s, 1 "${PROMPT:-512}")")
  wall=$(env $e timeout 120 "${gen[@]}" -n 256 2>/dev/null |
    python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["decode_tokens_per_s"])')
  env $e timeout 240 "$NCU" --clock-control none --csv --page raw \
    --metrics gpu__time_duration.sum --launch-skip "${SKIP:-3000}" \
    --launch-count "${COUNT:-1200}" "${gen[@]}" -n 64 > "$D/step_$tag.csv" 2>"$D/step_$tag.err"
  us=$(python3 -c "print('%.1f' % (1e6 / $wall))")
  echo "== $s $ab: generate decode ${wall} tok/s = $us us/step"
  python3 - "$D/step_$tag.csv" <<'PY'
import sys, collections
sys.path.insert(0, "tools/diag")
from ncu_csv import kernels
ks = [(name + " " + grid, us) for name, grid, us in kernels(sys.argv[1], True)]
if not ks:
    print("no ncu rows"); raise SystemExit
# whole steps only: from after the first sampling kernel to the last one
ends = [i for i, (k, _) in enumerate(ks) if "greedy" in k or "argmax" in k]
if len(ends) < 2:
    print("fewer than two steps in the window; raise COUNT"); raise SystemExit
steps = len(ends) - 1
t = collections.defaultdict(float); n = collections.Counter()
for k, v in ks[ends[0] + 1:ends[-1] + 1]:
    t[k] += v; n[k] += 1
print(f"{'kernel (grid)':48s} {'launch/step':>11s} {'us/step':>9s} {'us/launch':>9s}")
for k, v in sorted(t.items(), key=lambda kv: -kv[1]):
    print(f"{k[:48]:48s} {n[k] / steps:11.1f} {v / steps:9.1f} {v / n[k]:9.2f}")
print(f"{'sum of kernel times (' + str(steps) + ' steps)':48s} {sum(n.values()) / steps:11.1f} "
      f"{sum(t.values()) / steps:9.1f}")
PY
}
if [ -n "${MODELS:-}" ]; then
  for c in $MODELS; do for ab in ${AB:--}; do one "$c" "$c" "$(ab_env "$ab")" "$ab"; done; done
else
  each_shape_ab one
fi
