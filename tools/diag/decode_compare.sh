#!/usr/bin/env bash
# GPU machine: quality of the decode kernels. The 8B synthetic checkpoint and its MLX
# conversions (QUANT, default "4:64 8:64"), then `mlxcel compare --decode` of each against
# the bf16 source (256 positions after a 32-token prompt; model A one token per forward, so
# its one-row qmv / GEMV is what is measured), once per environment in AB ("-" = as is).
# Prints: checkpoint, environment, top-1 %, KL mean, KL max. Short lines only. MBIN: another
# build to run (e.g. .carry/dev/mlxcel-base, packed beside).
#   AB="- MLXCEL_QMV_I8=8" QUANT="4:64 8:64" bash tools/diag/decode_compare.sh
set -u
. bench/device_env.sh
diag_init
W=/tmp/mlxcel-dev; S=$W/llama-3.1-8b; M=${MBIN:-.carry/dev/mlxcel}
QUANT=${QUANT-4:64 8:64} BENCH=0 bash tools/diag/quant_b1.sh | grep -v '^== done'
ids=$(python3 -c "import random; r=random.Random(7)
print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
for q in ${QUANT-4:64 8:64}; do
  d=$S-q${q%%:*}g${q##*:}
  [ -e "$d/config.json" ] || { echo "$d: missing"; continue; }
  for e in ${AB:--}; do
    env $(ab_env "$e") timeout 120 "$M" compare -m "$d" --ref "$S" --prompt-ids "$ids" \
      -n "${N:-256}" --device cuda --decode --json 2> "$W/cmp.err" |
      python3 -c "import json,sys; j=json.load(sys.stdin)
print('decode-compare', '$(basename "$M")', '$(basename "$d")', '$e', j['top1_agreement_pct'], j['kl_mean'],
      j['kl_max'])" || tail -2 "$W/cmp.err"
  done
done
