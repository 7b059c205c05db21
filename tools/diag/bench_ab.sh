#!/usr/bin/env bash
# GPU machine: `mlxcel bench` on dummy weights (make_synthetic.py --config-only) of SHAPES,
# once per environment in AB ("-" = as is; "A=1,B=2" sets both), at BATCH (prompt 512,
# gen 128, REPEAT runs, medians). Quick A/Bs of decode settings without weight files; the
# dummy weights are random like the synthetic ones, and decode time does not depend on values.
# Carry .carry/devpack.tar.xz.
# An entry's BIN=name runs .carry/dev/name instead of .carry/dev/mlxcel (a build of another
# commit packed beside it: A/B of a code change in one call).
#   SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_GEMV_KSPLIT=1" BATCH=1 \
#     bash tools/diag/bench_ab.sh
#   AB="- BIN=mlxcel-base" BATCH=1 bash tools/diag/bench_ab.sh
set -u
. bench/device_env.sh
diag_init
M=.carry/dev/mlxcel
one() { # shape, config dir, environment, A/B entry
  local m=$M e="" v
  for v in $3; do
    case $v in BIN=*) m=.carry/dev/${v#BIN=} ;; *) e="$e $v" ;; esac
  done
  env $e timeout 120 "$m" bench -m "$2" --load-format dummy --device cuda --prompt-tokens 512 \
    --gen-tokens 128 --batch "${BATCH:-1}" --repeat "${REPEAT:-2}" 2>/dev/null |
    grep -E '^ +[0-9]+ ' | sed "s|^|$1 $4 |"
}
each_shape_ab one
