#!/usr/bin/env bash
# GPU machine (session 20): is #6's "8-bit top-1 >= 99% against bf16" reachable on the
# synthetic 8B at all? The same agreement with no mlxcel arithmetic in it: transformers (fp32
# and bf16) on the q8g64 checkpoint dequantized (`mlxcel convert -d`, values s q + b in
# bf16), teacher-forced over the bf16 checkpoint's greedy 256 tokens (mlxcel, CUDA; the
# 8B bf16 tokens agree 99.2% with transformers fp32), beside mlxcel's own
# `compare --decode` of q8g64 against bf16. Reuses tools/diag/quant_b1.sh's checkpoints.
# Carry .carry/devpack.tar.xz.   bash tools/diag/q8_quality_ref.sh
set -u
. bench/device_env.sh
diag_init
W=/tmp/mlxcel-dev; M=.carry/dev/mlxcel; S=$W/llama-3.1-8b; Q=$S-q8g64; DQ=$S-q8g64-deq
[ -e "$S/config.json" ] || python3 tools/reference/make_synthetic.py "$S" --shape llama-3.1-8b > "$W/synth.log" 2>&1
[ -e "$Q/config.json" ] || "$M" convert --hf-path "$S" --mlx-path "$Q" -q --q-bits 8 --q-group-size 64 --no-progress > "$W/c8.log" 2>&1
rm -rf "$DQ"; "$M" convert --hf-path "$Q" --mlx-path "$DQ" -d --dtype bfloat16 --no-progress > "$W/dq.log" 2>&1 || tail -3 "$W/dq.log"
echo "== checkpoints: $((SECONDS - T0)) s"
ids=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
"$M" generate -m "$S" --device cuda --prompt-ids "$ids" -n 256 --temp 0 --ignore-eos --json > "$D/bf16.json" 2>/dev/null
"$M" generate -m "$Q" --device cuda --prompt-ids "$ids" -n 256 --temp 0 --ignore-eos --json > "$D/q8.json" 2>/dev/null
"$M" compare -m "$Q" --ref "$S" --prompt-ids "$ids" -n 256 --device cuda --decode 2>&1 | tail -4
echo "== mlxcel: $((SECONDS - T0)) s"
timeout 240 python3 tools/reference/transformers_bench.py "$DQ" --no-timing --agree "$D/bf16.json" "$D/q8.json" \
  --fp32-agree --out "$D/hf_deq.json" 2>&1 | grep -i "agreement"
python3 - "$D/hf_deq.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("agreement", "agreement_fp32"):
    for r in j.get(k, []):
        ms = sorted(round(m["margin"], 3) for m in r.get("mismatches", []))
        print(k, r["file"].split("/")[-1], f"{100 * r['agreement']:.1f}%", "median margin",
              round(r["median_margin"], 3), "mismatch margins", ms[:12])
PY
echo "== end: $((SECONDS - T0)) s"
