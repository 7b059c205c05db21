#!/usr/bin/env bash
# GPU machine: the same decode from synthetic weight files and from --load-format dummy (every
# layer a view of one random buffer), to tell a loader / placement effect from a code change
# when B=1 figures of the two kinds are compared across commits. SHAPE (default
# llama-3.1-8b), BATCH (1), REPEAT (2); prompt 512, gen 128. Short lines only.
#   SHAPE=llama-3.1-8b bash tools/diag/dummy_vs_files.sh
set -u
. bench/device_env.sh
diag_init
S=${SHAPE:-llama-3.1-8b}; W=/tmp/mlxcel-dev; mkdir -p "$W"; M=.carry/dev/mlxcel
[ -e "$W/$S/config.json" ] || python3 tools/reference/make_synthetic.py "$W/$S" --shape "$S" \
  > "$W/synth.log" 2>&1 || { tail -3 "$W/synth.log"; exit 1; }
for how in files dummy files dummy; do
  lf=""; [ "$how" = dummy ] && lf="--load-format dummy"
  timeout 120 "$M" bench -m "$W/$S" $lf --device cuda --prompt-tokens 512 --gen-tokens 128 \
    --batch "${BATCH:-1}" --repeat "${REPEAT:-2}" 2>/dev/null | grep -E '^ +[0-9]+ ' |
    awk -v h="$how" '{print h, $1, $4, $10}'
done
