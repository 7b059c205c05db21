#!/usr/bin/env bash
# Structured output end to end: `mlxcel serve` on the demo model, driven by the official openai
# client and ajv (structured_e2e.mjs), and the server's log checked for the token-bytes line.
# usage: structured_e2e.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$SRC/tests/server/lib.sh"
if [ ! -d "$HERE/node_modules/openai" ] || [ ! -d "$HERE/node_modules/ajv" ]; then
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi
OMP_NUM_THREADS=1 "$MLXCEL" serve -m "$SRC/models/wordnet-chat-16m" --port 0 --port-file "$TMP/port" -np 4 \
    -c 512 >"$TMP/log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "server did not start:"; cat "$TMP/log"; exit 1; }
PORT=$(cat "$TMP/port")
node "$HERE/structured_e2e.mjs" "http://127.0.0.1:$PORT" wordnet-chat-16m && ok || bad "structured_e2e.mjs"
grep -q "grammar: token bytes of 8192 tokens ready" "$TMP/log" && ok || bad "no token-bytes line in the log"

# Enforced tool calls (tool_choice required / named): the demo model behind Hermes' call syntax
# (its ChatML template has no tools section: they go into the system message).
OMP_NUM_THREADS=1 "$MLXCEL" serve -m "$SRC/models/wordnet-chat-16m" --port 0 --port-file "$TMP/port2" -np 4 \
    -c 1024 --tool-call-parser hermes >"$TMP/log2" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [ -s "$TMP/port2" ] && break; sleep 0.1; done
[ -s "$TMP/port2" ] || { echo "server did not start:"; cat "$TMP/log2"; exit 1; }
node "$HERE/tools_enforced_e2e.mjs" "http://127.0.0.1:$(cat "$TMP/port2")" wordnet-chat-16m && ok ||
    { bad "tools_enforced_e2e.mjs"; tail -20 "$TMP/log2"; }
echo "structured_e2e.sh: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
