#!/usr/bin/env bash
# GPU machine, one call (~9 min): the next launch's x computed by the o / down qmv's last CTA
# (MLXCEL_QMV_I8_NEXT, session 18). test_cuda's quant + e2e groups; qi_timeline's layer with
# it off (0) and on (10), interleaved, and one stamped run on; the synthetic 8B as MLX q4g64 /
# q8g64: greedy tokens on and off (the same int8 x, so the same tokens), then decode B=1 on /
# off interleaved. Carry .carry/devpack.tar.xz and .carry/tl (tools/diag/qi_timeline.sh).
#   bash tools/diag/next_x.sh
set -u
. bench/device_env.sh
diag_init
diag_test - quant,e2e
grep -E "q chain|NEXT" "$D/test--.log" | head -12 | cut -c1-150
QI_AB=${QI_AB:-0,10,0,10,0,10} timeout 60 .carry/tl/qi_notl 30 2>&1 | cut -c1-110
QI_AB=10 timeout 60 .carry/tl/qi_tl 30 > "$D/qi_tl.log" 2>&1
grep -E "^(==|  (waited|pro|b0|written|end))" "$D/qi_tl.log" | cut -c1-110
BATCH=1 QUANT="4:64 8:64" BF16=0 BENCH=0 timeout 300 bash tools/diag/quant_b1.sh | grep '^=='
W=/tmp/mlxcel-dev/llama-3.1-8b
ids=$(seq -s, 100 163)
for q in q4g64 q8g64; do
  for e in - MLXCEL_QMV_I8_NEXT=0; do
    env $(ab_env "$e") timeout 60 .carry/dev/mlxcel generate -m "$W-$q" --device cuda \
      --prompt-ids "$ids" -n 64 --temp 0 --ignore-eos --json 2> "$D/gen.log" |
      python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))' \
      > "$D/tok-$q-${e%%=*}.txt" || tail -2 "$D/gen.log"
  done
  cmp -s "$D/tok-$q--.txt" "$D/tok-$q-MLXCEL_QMV_I8_NEXT.txt" && echo "== $q tokens: identical" ||
    { echo "== $q tokens DIFFER"; head -c 200 "$D"/tok-$q-*.txt; }
done
echo "== $((SECONDS - T0)) s"
AB="- MLXCEL_QMV_I8_NEXT=0 - MLXCEL_QMV_I8_NEXT=0" BATCH=1 REPEAT=2 QUANT="4:64" BF16=0 \
  diag_quant 170
AB="- MLXCEL_QMV_I8_NEXT=0" BATCH=1 REPEAT=2 QUANT="8:64" BF16=0 diag_quant 90
echo "== done: $((SECONDS - T0)) s"
