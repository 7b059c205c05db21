#!/usr/bin/env bash
# GPU machine: the 8B synthetic checkpoint (bf16), its MLX 4-bit g64 conversion (QUANT="4:64",
# more with spaces), then `mlxcel bench` decode at BATCH (prompt 512, gen 128) on each, once
# per environment in AB (space-separated; "-" = as is; "A=1,B=2" sets both; BIN=name runs
# .carry/dev/name, a build packed beside: pack_device.sh BASE=). Short lines only.
#   BATCH=1 AB="- MLXCEL_CUDA_PDL=0" QUANT="4:64" BF16=1 bash tools/diag/quant_b1.sh
# BF16_AB: the environments for the bf16 checkpoint (default: AB). BENCH=0: the checkpoints only.
set -u
. bench/device_env.sh
diag_init
W=/tmp/mlxcel-dev; mkdir -p "$W"
M=.carry/dev/mlxcel
D=$W/llama-3.1-8b
T0=$SECONDS
[ -e "$D/config.json" ] || python3 tools/reference/make_synthetic.py "$D" --shape llama-3.1-8b > "$W/synth.log" 2>&1 ||
  { tail -3 "$W/synth.log"; exit 1; }
echo "== synthetic: $((SECONDS - T0)) s"
dirs=""
[ "${BF16:-1}" = 1 ] && dirs="$D"
for q in ${QUANT-4:64}; do
  qd=$D-q${q%%:*}g${q##*:}
  [ -e "$qd/config.json" ] || "$M" convert --hf-path "$D" --mlx-path "$qd" -q --q-bits "${q%%:*}" \
    --q-group-size "${q##*:}" > "$W/convert.log" 2>&1 || { tail -3 "$W/convert.log"; continue; }
  dirs="$dirs $qd"
done
echo "== converted: $((SECONDS - T0)) s"
[ "${BENCH:-1}" = 1 ] || dirs=""
for d in $dirs; do
  abs=${AB:--}
  [ "$d" = "$D" ] && abs=${BF16_AB:-$abs}
  for ab in $abs; do
    m=$M e=""
    for v in $(ab_env "$ab"); do
      case $v in BIN=*) m=.carry/dev/${v#BIN=} ;; *) e="$e $v" ;; esac
    done
    env $e timeout 120 "$m" bench -m "$d" --device cuda --prompt-tokens 512 --gen-tokens 128 \
      --batch "${BATCH:-1}" --repeat "${REPEAT:-2}" 2>/dev/null | grep -E '^ +[0-9]+ ' |
      sed "s|^|$(basename "$d") $ab |"
  done
done
echo "== done: $((SECONDS - T0)) s"
