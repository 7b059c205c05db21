#!/usr/bin/env bash
# MLXCEL_PROFILE_TTFT=1 on the server: one [TTFT] line per request in the log, with the
# prefill forwards the engine ran for it. The demo model with 4-token prefill chunks: a
# 16-token chat prompt is four forwards of 4 rows (streamed and not).
# usage: ttft_e2e.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
MLXCEL_PROFILE_TTFT=1 OMP_NUM_THREADS=1 "$MLXCEL" serve -m "$SRC/models/wordnet-chat-16m" --port 0 \
    --port-file "$TMP/port" -np 2 -c 256 -ub 4 --prefill-chunk-size 4 >"$TMP/log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "server did not start:"; cat "$TMP/log"; exit 1; }
URL="http://127.0.0.1:$(cat "$TMP/port")/v1/chat/completions"
body() { printf '{"messages":[{"role":"user","content":"What does \\"%s\\" mean?"}],"max_tokens":3%s}' "$1" "$2"; }
ID1=$(curl -sS -m 60 "$URL" -H 'Content-Type: application/json' -d "$(body ocean '')" | jq_ 'o.id')
curl -sSN -m 60 "$URL" -H 'Content-Type: application/json' -d "$(body ocean ',"stream":true')" >"$TMP/sse"
ID2=$(sed -n 's/^data: {"id":"\([^"]*\)".*/\1/p' "$TMP/sse" | head -1)
sleep 0.3
for id in "$ID1" "$ID2"; do
    line=$(grep -F "[TTFT] $id: " "$TMP/log")
    [ "$(grep -cF "[TTFT] $id: " "$TMP/log")" = 1 ] && ok || bad "$id: not exactly one [TTFT] line"
    for part in "prompt 16 tok (" "| template+tokenize " "| queue " \
                "| prefill 4 steps " "4/4 rows, " "4/4 rows)" "| between steps " "| first sample " \
                "| first byte out " "| total "; do
        grep -qF -- "$part" <<<"$line" && ok || bad "$id: no '$part' in: $line"
    done
    [ "$(grep -o '4/4 rows' <<<"$line" | wc -l)" = 4 ] && ok || bad "$id: not four 4-row forwards: $line"
done
echo "ttft_e2e.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
