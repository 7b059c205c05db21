#!/usr/bin/env bash
# GPU machine: top-1 agreement on a synthetic checkpoint (SHAPE, default llama-3.1-8b; extra
# make_synthetic.py arguments in SYNTH_ARGS): mlxcel's 256 greedy tokens against
# transformers bf16 (teacher-forced; with its own generate() floor and the fp32 upcast), then
# MLX 8-bit and 4-bit g64 conversions against the bf16 checkpoint (`mlxcel compare`).
#   SHAPE=llama-3.1-8b QUANT="8:64 4:64" bash tools/diag/top1_check.sh
set -u
. bench/device_env.sh
diag_init
M=.carry/dev/mlxcel; S=${SHAPE:-llama-3.1-8b}; W=/tmp/mlxcel-top1; mkdir -p "$W"
T0=$SECONDS
python3 tools/reference/make_synthetic.py "$W/$S" --shape "$S" ${SYNTH_ARGS:-} \
  > "$W/synth.log" 2>&1 || { tail -3 "$W/synth.log"; exit 1; }
echo "== synthetic $S ($(grep -o 'resid-scale [0-9.e-]*' "$W/$S/config.json")): $((SECONDS - T0)) s"
# the prompt bench/run_device.sh uses for its agreement check
ids=$(python3 -c "import random; r=random.Random(7)
print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
"$M" generate -m "$W/$S" --device cuda --prompt-ids "$ids" -n 256 --temp 0 --ignore-eos --json \
  > "$D/$S.generate.json" 2> "$D/$S.generate.log" || tail -3 "$D/$S.generate.log"
python3 tools/reference/transformers_bench.py "$W/$S" --no-timing --agree "$D/$S.generate.json" \
  --self-agree 256 --fp32-agree --out "$D/$S.hf.json" > "$D/$S.hf.log" 2>&1
grep -iE "agree" "$D/$S.hf.log" | cut -c1-160
echo "== transformers: $((SECONDS - T0)) s"
for q in ${QUANT-8:64 4:64}; do
  qd=$W/$S-q${q%%:*}g${q##*:}
  "$M" convert --hf-path "$W/$S" --mlx-path "$qd" -q --q-bits "${q%%:*}" --q-group-size "${q##*:}" \
    > "$W/convert.log" 2>&1 || { tail -3 "$W/convert.log"; continue; }
  "$M" compare -m "$qd" --ref "$W/$S" --prompt-ids "$ids" -n 256 --device cuda --json \
    > "$D/$S.q$q.compare.json" 2> "$D/compare.log" || tail -3 "$D/compare.log"
  echo "q$q $(cut -c1-400 "$D/$S.q$q.compare.json")"
  rm -rf "$qd"
done
echo "== done: $((SECONDS - T0)) s"
