#!/usr/bin/env bash
# GPU machine (~2 min): where a prefill's time goes per KV cache type. `mlxcel generate` of a
# PROMPT-token prompt (default 2048) and one token on the 8B shape's dummy weights under Nsight
# Compute (kernel duration only), for each type in TYPES (default "bf16 q8_0"), printing per
# kernel name the launches and the summed microseconds; the difference between the types is
# what their pools cost. Carry .carry/devpack.tar.xz.   TYPES="bf16 q8_0 f16" bash tools/diag/prefill_ncu.sh
set -u
. bench/device_env.sh
diag_init
M=.carry/dev/mlxcel
c=$(dummy_config llama-3.1-8b)
for t in ${TYPES:-bf16 q8_0}; do
  timeout 240 "$NCU" --clock-control none --csv --page raw --metrics gpu__time_duration.sum \
    "$M" generate -m "$c" --load-format dummy --device cuda --ignore-eos -n 1 -ctk "$t" -ctv "$t" \
    --prompt-ids "$(seq -s, 1 "${PROMPT:-2048}")" > "$D/prefill_$t.csv" 2> "$D/prefill_$t.err"
  echo "== $t"
  python3 - "$D/prefill_$t.csv" <<'PY'
import sys, collections
sys.path.insert(0, "tools/diag")
from ncu_csv import kernels
ks = kernels(sys.argv[1])
if not ks:
    print("no ncu rows"); raise SystemExit
t = collections.defaultdict(float); n = collections.Counter()
for k, _, us in ks:
    t[k] += us; n[k] += 1
for k, v in sorted(t.items(), key=lambda kv: -kv[1])[:14]:
    print(f"{k[:44]:44s} {n[k]:6d} {v:10.1f} us")
print(f"{'sum':44s} {sum(n.values()):6d} {sum(t.values()):10.1f} us")
PY
done
echo "== end: $((SECONDS - T0)) s"
