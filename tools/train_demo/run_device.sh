#!/usr/bin/env bash
# Train the demo model end to end on the GPU machine: tokenizer, model, reference samples.
#
# Usage: tools/train_demo/run_device.sh DATA_DIR OUT_DIR [STEPS]
#   DATA_DIR  output of tools/train_demo/prepare_data (train/heldout .jsonl.gz, stats.json)
#   OUT_DIR   gets tokenizer/, models/$NAME/ (the model as committed) and logs/
#   STEPS     comma list of tok,train,sample (default: tok,train,sample). Steps may run in
#             separate calls as long as OUT_DIR persists between them.
# Environment: MINUTES (training-loop budget, default 10), NAME (default wordnet-chat-16m),
#              TRAIN_ARGS (extra arguments for train.py, e.g. "--compile").
# Time: tok ~1 min, train MINUTES + ~1.5 min (tokenising, evaluation, export), sample ~1 min.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,12p' "$0"; exit 2
fi
DATA=$1
OUT=$2
STEPS=${3:-tok,train,sample}
MINUTES=${MINUTES:-10}
NAME=${NAME:-wordnet-chat-16m}
HERE=$(cd "$(dirname "$0")" && pwd)
TOK=$OUT/tokenizer
MODEL=$OUT/models/$NAME
LOGS=$OUT/logs
mkdir -p "$TOK" "$MODEL" "$LOGS"
for f in train.jsonl.gz heldout.jsonl.gz stats.json; do
  [ -f "$DATA/$f" ] || { echo "run_device: $DATA/$f missing (run prepare_data)"; exit 1; }
done

python3 -c 'import torch, transformers, tokenizers, numpy, matplotlib, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers",
      transformers.__version__, "tokenizers", tokenizers.__version__, "cuda",
      torch.cuda.is_available() and torch.cuda.get_device_name(0))' | tee "$LOGS/versions.txt"

has() { case ",$STEPS," in *",$1,"*) return 0;; *) return 1;; esac; }
T0=$(date +%s)
if has tok; then
  python3 "$HERE/train_tokenizer.py" "$DATA" "$TOK" 2>&1 | tee "$LOGS/tokenizer.log"
fi
T1=$(date +%s)
if has train; then
  # shellcheck disable=SC2086
  python3 "$HERE/train.py" "$DATA" "$TOK" "$MODEL" --minutes "$MINUTES" ${TRAIN_ARGS:-} \
    2>&1 | tee "$LOGS/train.log"
fi
T2=$(date +%s)
if has sample; then
  python3 "$HERE/sample.py" "$MODEL" "$MODEL/samples_transformers.json" 2>&1 \
    | tee "$LOGS/sample.log"
fi
T3=$(date +%s)
echo "tok $((T1 - T0)) s, train $((T2 - T1)) s, sample $((T3 - T2)) s" | tee "$LOGS/times.txt"

python3 - "$MODEL" <<'EOF'
import json, os, sys
d = sys.argv[1]
def load(n):
    p = os.path.join(d, n)
    return json.load(open(p)) if os.path.exists(p) else None
st, sm = load("train_stats.json"), load("samples_transformers.json")
print("\n==== summary: %s ====" % d)
files = sorted(os.listdir(d))
print("%-28s %10s" % ("file", "bytes"))
for n in files:
    print("%-28s %10d" % (n, os.path.getsize(os.path.join(d, n))))
print("%-28s %10d" % ("total", sum(os.path.getsize(os.path.join(d, n)) for n in files)))
if st:
    for k in ("parameters", "steps", "epochs", "tokens_per_second", "train_seconds",
              "exported_step", "final_train_loss", "final_heldout_loss",
              "heldout_unigram_entropy", "heldout_unigram_cross_entropy_from_train"):
        print("%-42s %s" % (k, st.get(k)))
if sm:
    for s in sm["samples"]:
        print("Q: %s\nA: %s  [eos %s, min margin %s, no-cache agrees %s]"
              % (s["prompt"], s["generated_text"], s["stopped_at_eos"], s["min_margin"],
                 s["no_cache_loop_agrees"]))
EOF
