#!/usr/bin/env bash
# /v1/responses (OpenAI Responses API) and /v1/messages (Anthropic Messages API) end to end:
#   - the official `openai` and `@anthropic-ai/sdk` clients (apis_e2e.mjs) against the fake
#     backend serving Qwen 3's template with scripted replies, and against the demo model on
#     the real engine (answers equal to the chat route's);
#   - the job machinery as on the chat route: a full queue answers 503 (Responses) / 529
#     overloaded_error (Messages), a client that hangs up mid-stream has its sequence cancelled
#     (KV blocks free), /metrics counts the requests; API keys as Bearer or x-api-key, 401 in
#     each API's shape.
# usage: apis_e2e.sh FAKE_SERVER_BIN MLXCEL_BIN
set -uo pipefail
FAKE=$1
MLXCEL=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

# start NAME BIN ARGS... : sets PORT
start() {
    local name=$1 bin=$2; shift 2
    "$bin" "$@" --port 0 --port-file "$TMP/$name.port" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}
# post PATH BODY [curl args] -> CODE, BODY (port $PORT)
post() {
    local p=$1 d=$2; shift 2
    BODY=$(curl -sS -m 30 -o - -w '\n%{http_code}' "http://127.0.0.1:$PORT$p" -H 'Content-Type: application/json' \
        --data-binary "$d" "$@")
    CODE=${BODY##*$'\n'}
    BODY=${BODY%$'\n'*}
}
metric() { curl -sS -m 10 "http://127.0.0.1:$PORT/metrics" | sed -n "s/^$1 //p"; }

# ==== npm clients (pinned by package-lock.json, git-ignored node_modules) ====
if [ ! -d "$HERE/node_modules/openai" ] || [ ! -d "$HERE/node_modules/@anthropic-ai/sdk" ]; then
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi

# ==== The clients against the fake backend (Qwen 3's template, scripted replies) ====
node -e 'const f=require(process.argv[1]);require("fs").writeFileSync(process.argv[2],f.chat_template)' \
    "$SRC/tests/fixtures/templates/qwen3.json" "$TMP/qwen3.jinja"
start fake "$FAKE" -np 8 -a fake-model --metrics --chat-template-file "$TMP/qwen3.jinja" \
    --fake-script "$SRC/tests/fixtures/toolcalls/fake_script_apis.json"
if timeout 240 node "$HERE/apis_e2e.mjs" "http://127.0.0.1:$PORT" fake; then ok; else bad "clients against the fake backend"; fi
# /metrics counted them like chat requests
[ "$(metric 'mlxcel_requests_finished_total{reason="stop"}' | cut -d. -f1)" -gt 20 ] && ok ||
    bad "/metrics: requests of /v1/responses and /v1/messages not counted as finished"
[ "$(metric 'mlxcel_http_responses_total{code="400"}' | cut -d. -f1)" -gt 40 ] && ok || bad "/metrics: the 400s not counted"
[ "$(metric mlxcel_kv_blocks_used)" = 0 ] && ok || bad "KV blocks held after the clients' run"

# ==== The demo model: both routes answer as the chat route does ====
OMP_NUM_THREADS=1 start demo "$MLXCEL" serve -m "$SRC/models/wordnet-chat-16m" -np 4
if timeout 240 node "$HERE/apis_e2e.mjs" "http://127.0.0.1:$PORT" demo; then ok; else bad "clients against the demo model"; fi

# ==== A full queue: 503 on /v1/responses, 529 overloaded_error on /v1/messages ====
start q "$FAKE" --parallel 1 --max-queue-depth 1 --fake-step-ms 1200
curl -sN -m 30 "http://127.0.0.1:$PORT/v1/responses" -d '{"input":"a","max_output_tokens":3,"stream":true}' >"$TMP/q1.txt" &
Q1=$!
sleep 1.6 # the first step has admitted request 1
curl -sS -m 30 -o "$TMP/q2.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/messages" \
    -d '{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"b"}]}' >"$TMP/q2.code" &
Q2=$!
sleep 0.3
post /v1/responses '{"input":"c","max_output_tokens":1}'
[ "$CODE" = 503 ] && [ "$(echo "$BODY" | jq_ 'o.error.type')" = unavailable_error ] && ok || bad "responses, queue full: $CODE $BODY"
post /v1/messages '{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"c"}]}'
[ "$CODE" = 529 ] && [ "$(echo "$BODY" | jq_ 'o.type+" "+o.error.type')" = "error overloaded_error" ] && ok ||
    bad "messages, queue full: $CODE $BODY"
wait $Q1 $Q2
[ "$(cat "$TMP/q2.code")" = 200 ] && ok || bad "the queued /v1/messages request must be served: $(cat "$TMP/q2.code")"
grep -Eq '^event: response.(completed|incomplete)$' "$TMP/q1.txt" && ok || bad "stream Q1 unfinished: $(tail -c 300 "$TMP/q1.txt")"

# ==== A client that hangs up mid-stream has its sequence cancelled ====
start e "$FAKE" --metrics --fake-step-ms 300
n=0
for route in responses messages; do
    # ignore_eos: llama-server's extension, taken on these routes as on the chat route
    if [ $route = responses ]; then body='{"input":"a","max_output_tokens":50,"stream":true,"ignore_eos":true}'
    else body='{"model":"m","max_tokens":50,"stream":true,"ignore_eos":true,"messages":[{"role":"user","content":"a"}]}'; fi
    curl -sN -m 30 "http://127.0.0.1:$PORT/v1/$route" -d "$body" 2>/dev/null | head -n 1 >/dev/null
    n=$((n + 1))
    CANC=0
    for _ in $(seq 60); do
        CANC=$(metric 'mlxcel_requests_finished_total{reason="cancelled"}')
        [ "${CANC:-0}" = $n ] && break
        sleep 0.1
    done
    [ "$CANC" = $n ] && ok || bad "$route: hang-up mid-stream not cancelled (cancelled=$CANC)"
    [ "$(metric mlxcel_kv_blocks_used)" = 0 ] && ok || bad "$route: KV blocks still used after the hang-up"
done

# ==== API keys: Bearer or x-api-key; a 401 in each API's shape ====
start k "$FAKE" --api-key sekrit
M='{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}'
post /v1/messages "$M" -H 'x-api-key: sekrit' -H 'anthropic-version: 2023-06-01'
[ "$CODE" = 200 ] && ok || bad "x-api-key: $CODE $BODY"
post /v1/messages "$M" -H 'Authorization: Bearer sekrit'
[ "$CODE" = 200 ] && ok || bad "Bearer on /v1/messages: $CODE $BODY"
post /v1/messages "$M" -H 'x-api-key: wrong'
[ "$CODE" = 401 ] && [ "$(echo "$BODY" | jq_ 'o.type+" "+o.error.type')" = "error authentication_error" ] && ok ||
    bad "wrong x-api-key: $CODE $BODY"
post /v1/responses '{"input":"x","max_output_tokens":2}' -H 'x-api-key: wrong'
[ "$CODE" = 401 ] && [ "$(echo "$BODY" | jq_ 'o.error.type')" = authentication_error ] && ok || bad "responses 401: $CODE $BODY"
post /v1/responses '{"input":"x","max_output_tokens":2}' -H 'x-api-key: sekrit'
[ "$CODE" = 200 ] && ok || bad "x-api-key on /v1/responses: $CODE $BODY"
post /v1/messages/count_tokens '{"model":"m","messages":[{"role":"user","content":"x"}]}'
[ "$CODE" = 401 ] && ok || bad "count_tokens without a key: $CODE"
CODE=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/responses")
[ "$CODE" = 405 ] || [ "$CODE" = 401 ] && ok || bad "GET /v1/responses: $CODE"

# Every server stops cleanly on SIGTERM (the store and the jobs freed; sanitizer builds report here)
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
if grep -l 'ERROR: \(Address\|Leak\)Sanitizer\|runtime error:' "$TMP"/*.log >/dev/null 2>&1; then
    bad "sanitizer report in a server log: $(grep -l 'Sanitizer\|runtime error:' "$TMP"/*.log)"
    grep -h -A20 'Sanitizer\|runtime error:' "$TMP"/*.log | head -60
else
    ok
fi

echo "apis e2e: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
