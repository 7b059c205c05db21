#!/usr/bin/env bash
# Decode speed with and without a JSON schema on a model (default: the demo model), CPU:
# `mlxcel generate --json` runs interleaved (none / schema / schema with the overlap worker),
# the decode tok/s of each and the mask time the engine reports.
# usage: bench/grammar_decode.sh [MLXCEL_BIN] [MODEL_DIR] [REPEATS]
# env: EXTRA="--device cuda" (more `mlxcel generate` flags, split on spaces)
set -uo pipefail
BIN=${1:-build-cpu/mlxcel}
MODEL=${2:-models/wordnet-chat-16m}
REPS=${3:-5}
SCHEMA='{"type":"object","properties":{"word":{"type":"string"},"meanings":{"type":"array","items":{"type":"object","properties":{"pos":{"enum":["noun","verb","adjective","adverb"]},"text":{"type":"string"},"examples":{"type":"array","items":{"type":"string"}}},"required":["pos","text","examples"]}}},"required":["word","meanings"]}'
PROMPT='What does "ocean" mean? Answer in JSON.'
run() { # run MODE SEED
    local args=(-m "$MODEL" -p "$PROMPT" -n 200 --seed "$2" --temp 0.8 --json ${EXTRA:-})
    case $1 in
        none) args+=(--ignore-eos); export MLXCEL_GRAMMAR_OVERLAP=0 ;;
        schema) args+=(-j "$SCHEMA"); export MLXCEL_GRAMMAR_OVERLAP=0 ;;
        overlap) args+=(-j "$SCHEMA"); export MLXCEL_GRAMMAR_OVERLAP=1 ;;
    esac
    "$BIN" generate "${args[@]}" 2>/dev/null | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const o = JSON.parse(s);
  const ms = o.grammar_mask_ms ?? 0, n = o.grammar_masks ?? 0;
  console.log(`${process.argv[1].padEnd(8)} tokens ${String(o.generated_tokens).padStart(4)}  decode ${o.decode_tokens_per_s.toFixed(1).padStart(6)} tok/s  masks ${String(n).padStart(4)}  mask ${n ? (1000 * ms / n).toFixed(1) : "-"} us/token  ${o.finish_detail}`);
});' "$1"
}
for r in $(seq "$REPS"); do
    for m in none schema overlap; do run $m "$r"; done
done
