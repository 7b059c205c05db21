#!/usr/bin/env bash
# Tensor-parallel serve smoke test (CPU): `mlxcel serve --tp-size 2` on the qwen3 and
# qwen3_moe golden fixtures (paired with the byte-level test tokenizer) answers the same greedy
# /completion text and token count as `--tp-size 1`, streamed and not; and --tp-size 3 (4 query
# / 2 KV heads) is refused at start with the reason.
# usage: tp_e2e.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

# serve_start DIR TP -> PORT (the server's pid joins PIDS)
serve_start() {
    local dir=$1 tp=$2 pf="$TMP/port.$RANDOM"
    OMP_NUM_THREADS=1 "$MLXCEL" serve -m "$dir" -a tiny --port 0 --port-file "$pf" -np 2 -c 128 \
        --tp-size "$tp" >"$TMP/log.$tp.$(basename "$dir")" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 150); do [ -s "$pf" ] && break; sleep 0.1; done
    PORT=$(cat "$pf" 2>/dev/null)
}
# completion PORT STREAM -> the generated text + tokens_predicted
completion() {
    local body='{"prompt":"The sky is","n_predict":24,"temperature":0'
    if [ "$2" = 1 ]; then
        curl -sN -m 60 "http://127.0.0.1:$1/completion" -d "$body,\"stream\":true}" |
            sed -n 's/^data: //p' | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{let t="";for(const l of s.split("\n")){if(!l.trim())continue;const o=JSON.parse(l);t+=o.content||""}console.log(JSON.stringify(t))})'
    else
        curl -sS -m 60 "http://127.0.0.1:$1/completion" -d "$body}" | jq_ 'JSON.stringify(o.content)+" "+o.tokens_predicted'
    fi
}

for fx in qwen3 qwen3_moe; do
    M=$TMP/$fx
    mkdir -p "$M"
    for f in "$SRC/tests/fixtures/models/$fx"/config.json "$SRC/tests/fixtures/models/$fx"/*.safetensors; do
        ln -s "$f" "$M/"
    done
    cp "$SRC/tests/fixtures/serve_tokenizer/tokenizer.json" "$SRC/tests/fixtures/serve_tokenizer/tokenizer_config.json" "$M/"
    serve_start "$M" 1; P1=$PORT
    serve_start "$M" 2; P2=$PORT
    if [ -z "$P1" ] || [ -z "$P2" ]; then
        bad "$fx: a server did not start"; cat "$TMP"/log.*; continue
    fi
    A=$(completion "$P1" 0); B=$(completion "$P2" 0)
    [ -n "$A" ] && [ "${A% *}" != '""' ] && [ "$A" = "$B" ] && ok || bad "$fx /completion TP=2 '$B' != TP=1 '$A'"
    A=$(completion "$P1" 1); B=$(completion "$P2" 1)
    [ -n "$A" ] && [ "$A" != '""' ] && [ "$A" = "$B" ] && ok || bad "$fx streamed TP=2 '$B' != TP=1 '$A'"
    echo "$fx: TP=1 and TP=2 answer $A"
done

# refused at start, with the reason (4 query / 2 KV heads do not split 3 ways)
OUTR=$("$MLXCEL" serve -m "$TMP/qwen3" --port 0 --tp-size 3 2>&1 </dev/null)
RC=$?
[ $RC -ne 0 ] && echo "$OUTR" | grep -q "divisible by the TP size" && ok || bad "--tp-size 3 not refused (rc $RC): $OUTR"

echo "tp_e2e: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
