#!/usr/bin/env bash
# A/B of CPU cascade attention through `mlxcel bench`: the same bench command with
# MLXCEL_CASCADE_ATTENTION=0 and with the default (auto), run alternately PAIRS times (the
# order flips every pair, so drift on a shared machine hits both sides), medians of prefill and
# decode tok/s per side, and their ratio. Optionally a third binary (BASE=path/to/mlxcel of an
# earlier commit) runs in each round too, without the variable.
#   usage: PAIRS=3 bench/cpu_cascade_ab.sh MLXCEL MODEL_DIR BENCH_ARGS...
#   e.g.   bench/cpu_cascade_ab.sh build/mlxcel /tmp/m100 --prompt-tokens 2112 \
#              --shared-prefix 2048 --gen-tokens 64 --batch 8 --repeat 1
# Prints one line per run (side, prefill tok/s, decode tok/s) and a summary; every run's JSON
# goes to ${OUT:-/tmp/cpu_cascade_ab}/.
set -euo pipefail
BIN=$1 MODEL=$2
shift 2
PAIRS=${PAIRS:-3}
OUT=${OUT:-/tmp/cpu_cascade_ab}
mkdir -p "$OUT"
run() { # run SIDE BINARY [ENV...]
    local side=$1 bin=$2 f
    shift 2
    f=$OUT/$side-$(date +%s%N).json
    env "$@" "$bin" bench -m "$MODEL" --device cpu --json "${ARGS[@]}" >"$f" 2>"$f.log"
    python3 - "$f" "$side" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(f"{sys.argv[2]} {r['prefill_tok_s']:.1f} {r['decode_tok_s']:.1f}")
EOF
}
ARGS=("$@")
LINES=()
for p in $(seq "$PAIRS"); do
    sides=(off auto)
    [ $((p % 2)) -eq 0 ] && sides=(auto off)
    for s in "${sides[@]}"; do
        if [ "$s" = off ]; then LINES+=("$(run off "$BIN" MLXCEL_CASCADE_ATTENTION=0)")
        else LINES+=("$(run auto "$BIN")"); fi
        echo "${LINES[-1]}"
    done
    if [ -n "${BASE:-}" ]; then LINES+=("$(run base "$BASE")"); echo "${LINES[-1]}"; fi
done
printf '%s\n' "${LINES[@]}" | python3 -c '
import sys, statistics as st
d = {}
for l in sys.stdin:
    s, pf, dc = l.split()
    d.setdefault(s, []).append((float(pf), float(dc)))
med = {s: (st.median(x[0] for x in v), st.median(x[1] for x in v)) for s, v in d.items()}
for s, (pf, dc) in med.items():
    print(f"median {s}: prefill {pf:.1f} tok/s, decode {dc:.1f} tok/s ({len(d[s])} runs)")
if "off" in med and "auto" in med:
    a, o = med["auto"], med["off"]
    print(f"auto / off: prefill x{a[0] / o[0]:.2f}, decode x{a[1] / o[1]:.2f}")
'
