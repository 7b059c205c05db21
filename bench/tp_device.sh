#!/usr/bin/env bash
# Tensor parallelism on the GPU machine (docs/tensor-parallel.md, issue #10). One command,
# self-contained; results under $OUT; the short table is printed last.
#
#   here:        bash bench/pack_device.sh               # builds + packs .carry/dev
#   GPU machine: bash bench/tp_device.sh                 # carry: .carry/dev
#                (or TP=1 bash bench/run_device.sh: runs this after its own stages)
#
# Stages (each compares greedy token ids, `generate --json`):
#   1 GPU or more:
#     - tiny fixtures (llama qwen3 gemma3_text qwen3_moe mixtral): the plain CUDA path vs
#       MLXCEL_TP_GROUP=1 (a TP group of one rank: rank thread + NCCL collective of size 1)
#       -> identical tokens expected;
#     - `--tp-size <GPUs + 1>` refused with the GPU count;
#     - synthetic llama-3.1-8b (tools/reference/make_synthetic.py): plain vs group of one, 64
#       tokens -> identical.
#   2 GPUs or more (nvidia-smi -L):
#     - tiny fixtures TP=2 vs TP=1 tokens (equal expected; not bit-identical logits);
#     - 8B: `mlxcel compare --tp-size 2` (and 4 with 4 GPUs) against TP=1, 128 tokens: top-1
#       agreement, KL; `mlxcel bench --batch 1,32` TP=1 vs TP=2 (decode tok/s).
# Environment: BUDGET=540 (s)  WORK=/tmp/mlxcel-dev (the 8B checkpoint is reused from there)
#   SKIP_8B=0  GEN=64  PYTHON=python3
# Output ($OUT): tp-<date>-<commit>.md (the table) and tp-logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$SECONDS
OUT=${OUT:-/tmp/mlxcel-out}
WORK=${WORK:-/tmp/mlxcel-dev}
BUDGET=${BUDGET:-540}
GEN=${GEN:-64}
PY=${PYTHON:-python3}
LOG=$WORK/tp-logs
mkdir -p "$OUT" "$LOG"
. bench/device_env.sh
# NVLink multicast stays off (mlxcel sets NCCL_NVLS_ENABLE=0 itself as well)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
device_libs
# libnccl.so.2 (dlopened by mlxcel): the CUDA tree or the nvidia-nccl wheel
NCCLDIR=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do [ -e "$d/libnccl.so.2" ] && NCCLDIR=$d && break; done
[ -z "$NCCLDIR" ] && NCCLDIR=$("$PY" - <<'PY' 2>/dev/null
import glob, os, site
for p in site.getsitepackages():
    for f in glob.glob(os.path.join(p, "nvidia", "**", "libnccl.so.2*"), recursive=True):
        print(os.path.dirname(f)); raise SystemExit
PY
)
[ -n "$NCCLDIR" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$NCCLDIR"
exec > >(tee -a "$LOG/tp.log") 2>&1
COMMIT=${COMMIT:-$(cat .carry/dev/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
DATE=$(date -u +%Y-%m-%d)
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
stage "tp_device.sh $DATE commit $COMMIT: $NG GPU(s), libnccl in ${NCCLDIR:-NOT FOUND}"
MLX=.carry/dev/mlxcel
if ! runnable "$MLX"; then
  stage "carried mlxcel missing or not loadable; building here"
  device_build mlxcel && MLX=build-dev/mlxcel || { echo "FATAL: no runnable mlxcel"; exit 2; }
fi
ROWS=()   # "check | result | detail"
row() { ROWS+=("| $1 | $2 | $3 |"); echo "-> $1: $2 ($3)"; }

# gen DIR IDS N TAG [env...] -> $LOG/TAG.json; prints the token ids (comma-separated)
gen() {
  local dir=$1 ids=$2 n=$3 tag=$4; shift 4
  env "$@" timeout "$(tl)" "$MLX" generate -m "$dir" --device cuda --prompt-ids "$ids" -n "$n" --temp 0 \
    --ignore-eos --json > "$LOG/$tag.json" 2> "$LOG/$tag.log"
  "$PY" -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$LOG/$tag.json" 2>/dev/null
}
# same A B -> "identical" or "DIFFER at token i"
same() {
  "$PY" -c "
import sys
a, b = sys.argv[1].split(','), sys.argv[2].split(',')
if not a[0] or not b[0]: print('MISSING'); raise SystemExit
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
print('identical' if i is None and len(a) == len(b) else 'DIFFER at token %s of %d' % (i if i is not None else min(len(a), len(b)), len(a)))" "$1" "$2"
}

# ==== Tiny fixtures ====
for fx in llama qwen3 gemma3_text qwen3_moe mixtral; do
  dir=tests/fixtures/models/$fx
  [ -e "$dir/config.json" ] || continue
  ids=$("$PY" -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['cases'][0]['prompt_ids'])))" "$dir/expected.json")
  stage "$fx: plain vs group of one (NCCL, 1 rank)"
  a=$(gen "$dir" "$ids" 24 "$fx.plain")
  b=$(gen "$dir" "$ids" 24 "$fx.group1" MLXCEL_TP_GROUP=1)
  row "$fx plain vs TP group of 1" "$(same "$a" "$b")" "24 tokens"
  if [ "$NG" -ge 2 ]; then
    c=$(env timeout "$(tl)" "$MLX" generate -m "$dir" --device cuda --prompt-ids "$ids" -n 24 --temp 0 \
        --ignore-eos --json --tp-size 2 2> "$LOG/$fx.tp2.log" | tee "$LOG/$fx.tp2.json" |
        "$PY" -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['tokens'])))" 2>/dev/null)
    row "$fx TP=2 vs TP=1" "$(same "$a" "$c")" "24 tokens; $(tail -1 "$LOG/$fx.tp2.log" | cut -c1-80)"
  fi
done
stage "refusal: --tp-size $((NG + 1)) with $NG GPU(s)"
msg=$("$MLX" generate -m tests/fixtures/models/llama --device cuda --prompt-ids 1,2 -n 2 --tp-size $((NG + 1)) 2>&1 >/dev/null | tail -1)
echo "$msg"
echo "$msg" | grep -q "GPU" && [ "$NG" -ge 1 ] && row "--tp-size $((NG + 1)) refused" ok "$(echo "$msg" | cut -c1-90)" ||
  row "--tp-size $((NG + 1)) refused" FAIL "$(echo "$msg" | cut -c1-90)"

# ==== Synthetic llama-3.1-8b ====
dir=$WORK/llama-3.1-8b
if [ "${SKIP_8B:-0}" != 1 ] && [ "$(left)" -gt 120 ]; then
  if [ ! -e "$dir/config.json" ]; then
    stage "llama-3.1-8b: synthetic checkpoint"
    timeout "$(tl)" "$PY" tools/reference/make_synthetic.py "$dir" --shape llama-3.1-8b > "$LOG/synth.log" 2>&1 ||
      tail -5 "$LOG/synth.log"
  fi
  ids=$("$PY" -c "import random; r=random.Random(7); print(','.join(str(r.randrange(1000, 100000)) for _ in range(32)))")
  stage "llama-3.1-8b: plain vs group of one ($GEN tokens)"
  a=$(gen "$dir" "$ids" "$GEN" 8b.plain)
  b=$(gen "$dir" "$ids" "$GEN" 8b.group1 MLXCEL_TP_GROUP=1)
  row "8B plain vs TP group of 1" "$(same "$a" "$b")" "$GEN tokens"
  if [ "$NG" -ge 2 ]; then
    for tp in 2 4; do
      [ "$NG" -ge "$tp" ] || continue
      [ "$(left)" -gt 60 ] || { row "8B TP=$tp compare" SKIPPED "budget"; continue; }
      stage "llama-3.1-8b: compare TP=$tp vs TP=1 (128 tokens)"
      timeout "$(tl)" "$MLX" compare -m "$dir" --ref "$dir" --tp-size "$tp" --prompt-ids "$ids" -n 128 \
        --device cuda --json > "$LOG/8b.compare.tp$tp.json" 2> "$LOG/8b.compare.tp$tp.log"
      row "8B TP=$tp top-1 agreement vs TP=1" "$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.2f%%, KL mean %.3g max %.3g' % (d['top1_agreement_pct'], d['kl_mean'], d['kl_max']))" "$LOG/8b.compare.tp$tp.json" 2>/dev/null || echo FAIL)" "$(tail -1 "$LOG/8b.compare.tp$tp.log" | cut -c1-80)"
    done
    for tp in 1 2; do
      [ "$(left)" -gt 60 ] || { row "8B bench TP=$tp" SKIPPED "budget"; continue; }
      stage "llama-3.1-8b: bench --batch 1,32 TP=$tp"
      timeout "$(tl)" "$MLX" bench -m "$dir" --device cuda --tp-size "$tp" --prompt-tokens 512 --gen-tokens 64 \
        --batch 1,32 --repeat 2 --json > "$LOG/8b.bench.tp$tp.json" 2> "$LOG/8b.bench.tp$tp.log"
      row "8B bench TP=$tp decode tok/s B=1, B=32" "$("$PY" -c "
import json,sys
d=json.load(open(sys.argv[1])); r={x['batch']: x for x in d['results']}
print(', '.join('B=%d %.1f' % (b, r[b].get('decode_tok_s', r[b].get('tg_tok_s', 0))) for b in sorted(r)))" "$LOG/8b.bench.tp$tp.json" 2>/dev/null || echo FAIL)" "see 8b.bench.tp$tp.log"
    done
  fi
else
  row "8B" SKIPPED "SKIP_8B=1 or budget"
fi

# ==== A model larger than one GPU, served across NG GPUs ====
# Llama-3.1-70B's dimensions with 96 layers: 84.2 B parameters, 168 GB in bf16, more than one
# H200's 150 GB; `--load-format dummy` generates the weights (no 168 GB of files on disk).
if [ "$NG" -ge 2 ] && [ "$(left)" -gt 150 ]; then
  big=$WORK/llama-96l-dummy
  mkdir -p "$big"
  cat > "$big/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
 "intermediate_size": 28672, "num_hidden_layers": 96, "num_attention_heads": 64,
 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-05,
 "rope_theta": 500000.0, "max_position_embeddings": 8192, "tie_word_embeddings": false,
 "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001}
JSON
  stage "84B dummy (168 GB bf16): TP=1 must not fit, TP=$NG serves"
  timeout 120 "$MLX" generate -m "$big" --load-format dummy --device cuda --prompt-ids 1,2,3 -n 4 \
    --temp 0 > "$LOG/big.tp1.log" 2>&1
  row "84B (168 GB) on 1 GPU" "$([ $? -ne 0 ] && echo refused-or-failed || echo RAN)" "$(tail -1 "$LOG/big.tp1.log" | cut -c1-90)"
  timeout "$(tl)" "$MLX" bench -m "$big" --load-format dummy --device cuda --tp-size "$NG" \
    --prompt-tokens 128 --gen-tokens 32 --batch 1,8 --repeat 1 > "$LOG/big.bench.log" 2>&1
  row "84B (168 GB) TP=$NG bench" "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(grep -E '^ +[0-9]+ ' "$LOG/big.bench.log" | awk '{printf "B=%s %s tok/s; ", $1, $4}')"
else
  row "model larger than one GPU" SKIPPED "needs >= 2 GPUs and 150 s"
fi

# ==== Results ====
MD="$OUT/tp-$DATE-$COMMIT.md"
{
  echo "# tp_device.sh $DATE commit $COMMIT ($NG GPU(s))"
  echo
  echo "| check | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} > "$MD"
tar czf "$OUT/tp-logs.tgz" -C "$WORK" tp-logs 2>/dev/null
echo "== done in $((SECONDS - T0)) s: $MD"
cat "$MD"
