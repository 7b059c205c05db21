#!/usr/bin/env bash
# Soak (issue 50; not a CTest test: minutes, not seconds): `mlxcel serve` under CLIENTS
# streaming clients (a third hanging up at random), an idle-connection flood and oversized
# bodies at once for SECONDS; then every KV block, slot and queue entry must be free and RSS
# flat (tests/server/soak.mjs). Prints the figures; exit status 1 on any failure.
# usage: soak.sh MLXCEL_BIN MODEL_DIR [CLIENTS] [SECONDS] [-- serve flags...]
#   CPU (demo model):  tests/server/soak.sh build-cpu/mlxcel models/wordnet-chat-16m 64 180 -- -np 64 -c 256
#   GPU (256 streams): tests/server/soak.sh build/mlxcel MODEL 256 600 -- --device cuda -np 256 \
#                        --max-batch-size 256 -c 640 -b 2048 -ub 2048 --prefill-chunk-size 512
# env: FLOOD idle sockets (default 600), OUT a JSON file for the summary
set -uo pipefail
MLXCEL=$1
MODEL=$2
CLIENTS=${3:-64}
SECS=${4:-180}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = -- ] && shift
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

"$MLXCEL" serve -m "$MODEL" --metrics --port 0 --port-file "$TMP/port" "$@" >"$TMP/serve.log" 2>&1 &
SPID=$!
PIDS+=($SPID)
for _ in $(seq 1200); do [ -s "$TMP/port" ] && break; kill -0 $SPID 2>/dev/null || break; sleep 0.25; done
[ -s "$TMP/port" ] || { echo "server did not start:"; cat "$TMP/serve.log"; exit 1; }
echo "soak: $CLIENTS clients, ${FLOOD:-600} idle sockets, oversized bodies, $SECS s against $(grep -m1 'model:' "$TMP/serve.log")"
node "$HERE/soak.mjs" "http://127.0.0.1:$(cat "$TMP/port")" "$SPID" --clients "$CLIENTS" --seconds "$SECS" \
    --flood "${FLOOD:-600}" ${OUT:+--json "$OUT"}
rc=$?
kill -0 $SPID 2>/dev/null && echo "soak: server alive at the end" || { echo "soak: the server died"; rc=1; }
echo "soak: server log lines: $(wc -l <"$TMP/serve.log") (http: $(grep -c 'http:' "$TMP/serve.log"), of which suppressed-count notes: $(grep -c 'suppressed before' "$TMP/serve.log"))"
grep -E 'warn|error' "$TMP/serve.log" | sort | uniq -c | sort -rn | head -8 | cut -c1-220
exit $rc
