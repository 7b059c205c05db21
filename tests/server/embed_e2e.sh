#!/usr/bin/env bash
# Embeddings end to end (docs/embeddings.md): `mlxcel serve` on the demo model
# (models/wordnet-chat-16m: qwen3, tied embeddings, real tokenizer), four servers at once:
#   main  --embeddings (pooling last: the checkpoint has no sentence-transformers files), two
#         aliases, -np 4 and --max-queue-depth 8 (a 120-input batch and 5 requests of 3 inputs at
#         once must still be answered)
#   none  --embeddings --pooling none (llama-server's per-token /embedding; /v1 refuses it)
#   mean  --embeddings over a copy whose modules.json + 1_Pooling/config.json ask for mean pooling
#   off   no --embeddings: the embeddings routes answer 501, generation works
# then tests/server/embed_e2e.mjs drives them with the official `openai` package (string, list,
# token arrays, base64 decoded by the SDK and float, dimensions) and fetch (llama-server's
# shapes, embd_normalize, errors), and checks the servers against each other bit for bit (none's
# last row = main's raw vector; mean = the mean of none's rows). Start-up refusals: --pooling
# without --embeddings, --pooling rank, a Dense module, a max-pooling config.
# usage: embed_e2e.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
DEMO=$SRC/models/wordnet-chat-16m

if [ ! -d "$HERE/node_modules/openai" ]; then
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi

# model_copy DIR: the demo model's files linked into DIR (sentence-transformers files added after)
model_copy() {
    mkdir -p "$1"
    for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
        ln -s "$DEMO/$f" "$1/$f"
    done
}
pooling_cfg() { # pooling_cfg DIR MODE_KEY
    mkdir -p "$1/1_Pooling"
    printf '[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]' >"$1/modules.json"
    printf '{"word_embedding_dimension":384,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":false,"pooling_mode_max_tokens":false,"pooling_mode_mean_sqrt_len_tokens":false,"pooling_mode_weightedmean_tokens":false,"pooling_mode_lasttoken":false,"include_prompt":true}' |
        sed "s/\"$2\":false/\"$2\":true/" >"$1/1_Pooling/config.json"
}

# ==== Start-up refusals (each exits before listening) ====
refuses() { # refuses WHAT PATTERN ARGS...: the server exits non-zero with PATTERN in its log
    local what=$1 pat=$2; shift 2
    OMP_NUM_THREADS=1 timeout 60 "$MLXCEL" serve --port 0 "$@" >"$TMP/refuse.log" 2>&1
    local rc=$?
    if [ "$rc" -ne 0 ] && grep -qF -- "$pat" "$TMP/refuse.log"; then ok
    else bad "$what: exit $rc, log: $(head -c 600 "$TMP/refuse.log")"; fi
}
refuses "--pooling without --embeddings" "add --embeddings" -m "$DEMO" --pooling mean
refuses "--pooling rank" "reranking is not supported" -m "$DEMO" --embeddings --pooling rank
refuses "--pooling bogus" "expected none, mean, cls or last" -m "$DEMO" --embeddings --pooling max
model_copy "$TMP/dense"
pooling_cfg "$TMP/dense" pooling_mode_lasttoken
sed -i 's|"2_Normalize","type":"sentence_transformers.models.Normalize"|"2_Dense","type":"sentence_transformers.models.Dense"|' "$TMP/dense/modules.json"
refuses "a Dense module" "sentence_transformers.models.Dense) is not supported" -m "$TMP/dense" --embeddings
model_copy "$TMP/maxpool"
pooling_cfg "$TMP/maxpool" pooling_mode_max_tokens
refuses "max pooling" "pooling_mode_max_tokens" -m "$TMP/maxpool" --embeddings

# ==== Servers ====
model_copy "$TMP/meanmodel"
pooling_cfg "$TMP/meanmodel" pooling_mode_mean_tokens
start() { # start NAME ARGS... -> port in $TMP/port.NAME
    OMP_NUM_THREADS=1 "$MLXCEL" serve --port 0 --port-file "$TMP/port.$1" "${@:2}" >"$TMP/log.$1" 2>&1 &
    PIDS+=($!)
}
start main -m "$DEMO" -a demo,demo2 --embeddings -np 4 --max-queue-depth 8 -c 256
start none -m "$DEMO" --embeddings --pooling none -c 256
start mean -m "$TMP/meanmodel" --embeddings -c 256
LLAMA_ARG_EMBEDDINGS= start off -m "$DEMO" -c 256
for name in main none mean off; do
    for _ in $(seq 300); do [ -s "$TMP/port.$name" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/port.$name" ]; then echo "server $name did not start:"; cat "$TMP/log.$name"; exit 1; fi
done
grep -qF "embeddings: pooling last (no sentence-transformers modules.json" "$TMP/log.main" && ok ||
    bad "main: start-up line: $(grep embeddings "$TMP/log.main")"
grep -qF "embeddings: pooling mean ($TMP/meanmodel/1_Pooling/config.json: pooling_mode_mean_tokens)" "$TMP/log.mean" && ok ||
    bad "mean: start-up line: $(grep embeddings "$TMP/log.mean")"
grep -qF "embeddings: pooling none (--pooling)" "$TMP/log.none" && ok || bad "none: start-up line"

node "$HERE/embed_e2e.mjs" "$(cat "$TMP/port.main")" "$(cat "$TMP/port.none")" "$(cat "$TMP/port.mean")" \
    "$(cat "$TMP/port.off")" >"$TMP/node.log" 2>&1
rc=$?
cat "$TMP/node.log"
[ $rc -eq 0 ] && ok || bad "embed_e2e.mjs failed (exit $rc)"

# every server stops cleanly on SIGTERM
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" || bad "a server exited with $? after SIGTERM"; done
PIDS=()
if grep -l "ERROR: AddressSanitizer\|runtime error:" "$TMP"/log.* 2>/dev/null; then bad "sanitizer report"; fi

echo "embed_e2e: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
