#!/usr/bin/env bash
# Server hardening (issue 50), HTTP side, over the fake backend: each block replays an attack
# and checks the fixed behaviour.
#   3. empty API keys refused at start          4. Host / Origin for a keyless loopback server
#   5. strict framing (duplicate Content-Length) 6. libmicrohttpd's own errors, log flooding
#   7. queue gauges back to 0, Retry-After, GET /v1/models/{id}
# usage: harden_http.sh FAKE_SERVER_BIN MLXCEL_BIN
set -uo pipefail
FAKE=$1
MLXCEL=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

start() { # start NAME ARGS... : a fake server on an ephemeral port -> PORT, SPID
    local name=$1; shift
    "$FAKE" --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    SPID=$!
    PIDS+=($SPID)
    for _ in $(seq 100); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}
# code URL [curl args...] -> the status
code() { local u=$1; shift; curl -sS -m 10 -o "$TMP/body.txt" -w '%{http_code}' "$u" "$@"; }
metric() { curl -sS -m 10 "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 //p"; }

# ==== 3. an empty API key is refused at start, never a keyless server ====
# refused NAME ENV... -- ARGS... : the server exits 2 at once, naming the cause
refused() {
    local what=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout 10 "$FAKE" --port 0 "$@" >"$TMP/refused.log" 2>&1
    local rc=$?
    if [ $rc = 2 ] && grep -qF -- "$what" "$TMP/refused.log" && ! grep -q "listening" "$TMP/refused.log"; then ok
    else bad "refused start ($what): rc $rc: $(cat "$TMP/refused.log")"; fi
}
printf '# only comments\n\n   \n# key: none\n' >"$TMP/nokeys.txt"
refused "--api-key: an empty API key" -- --api-key ''
refused "--api-key: an empty API key" -- --api-key '  '
refused "(between commas)" -- --api-key 'a,,b'
refused "holds no API key" -- --api-key-file "$TMP/nokeys.txt"
refused "LLAMA_ARG_API_KEY is set but empty" LLAMA_ARG_API_KEY= -- 
refused "LLAMA_API_KEY is set but empty" LLAMA_API_KEY= -- 
refused "LLAMA_ARG_API_KEY_FILE is set but empty" LLAMA_ARG_API_KEY_FILE= -- 
refused "both set, to different keys" LLAMA_API_KEY=a LLAMA_ARG_API_KEY=b -- 
# the real binary refuses before it loads anything
timeout 10 "$MLXCEL" serve -m /nonexistent --api-key '' >"$TMP/serve.log" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "empty API key" "$TMP/serve.log" && ok || bad "mlxcel serve --api-key '': rc $rc $(cat "$TMP/serve.log")"
# LLAMA_ARG_API_KEY is a key; a flag still wins over an empty variable
LLAMA_ARG_API_KEY=argkey start k
[ "$(code "http://127.0.0.1:$PORT/v1/models")" = 401 ] && ok || bad "LLAMA_ARG_API_KEY must require a key"
[ "$(code "http://127.0.0.1:$PORT/v1/models" -H 'Authorization: Bearer argkey')" = 200 ] && ok || bad "LLAMA_ARG_API_KEY key refused"
grep -q "auth: 1 API key" "$TMP/k.log" && ok || bad "start-up log lacks the auth line"
LLAMA_API_KEY= start k2 --api-key flagkey
[ "$(code "http://127.0.0.1:$PORT/v1/models" -H 'Authorization: Bearer flagkey')" = 200 ] && ok || bad "--api-key over an empty LLAMA_API_KEY"

# ==== 4. Host / Origin on a keyless loopback server ====
start h --metrics
H=$PORT
grep -q "auth: none (no --api-key) on loopback" "$TMP/h.log" && ok || bad "start-up log lacks the keyless policy line"
for host in "localhost:$H" "127.0.0.1:$H" "127.9.9.9" "[::1]:$H" "app.localhost" "LOCALHOST."; do
    [ "$(code "http://127.0.0.1:$H/health" -H "Host: $host")" = 200 ] && ok || bad "Host $host refused"
done
for host in "evil.example" "evil.example:$H" "127.0.0.1.evil.example" "10.0.0.1" "localhost.evil.example"; do
    c=$(code "http://127.0.0.1:$H/v1/models" -H "Host: $host")
    [ "$c" = 403 ] && [ "$(jq_ 'o.error.code+o.error.type' <"$TMP/body.txt")" = 403permission_error ] &&
        grep -q -- "--allowed-hosts" "$TMP/body.txt" && ok || bad "DNS-rebinding Host $host: $c $(cat "$TMP/body.txt")"
done
# a cross-origin page: refused (403) unless loopback or the server's own; null never allowed
for o in "http://evil.example" "https://attacker.test:8443" "null" "http://127.0.0.1.evil.example"; do
    head_req POST "http://127.0.0.1:$H/completion" -H "Origin: $o" -d '{"prompt":"a","n_predict":1}'
    [ "$CODE" = 403 ] && ! grep -q '^access-control-allow-origin' <<<"$HDRS" && ok || bad "Origin $o: $CODE $HDRS"
    head_req OPTIONS "http://127.0.0.1:$H/completion" -H "Origin: $o" -H 'Access-Control-Request-Method: POST'
    [ "$CODE" = 403 ] && ! grep -q '^access-control-allow-credentials' <<<"$HDRS" && ok || bad "preflight from $o: $CODE $HDRS"
done
for o in "http://localhost:5173" "http://127.0.0.1:$H" "https://[::1]:8443"; do
    head_req POST "http://127.0.0.1:$H/completion" -H "Origin: $o" -d '{"prompt":"a","n_predict":1}'
    [ "$CODE" = 200 ] && has_hdr "access-control-allow-origin: $o" && has_hdr 'vary: Origin' && ok || bad "Origin $o: $CODE $HDRS"
    head_req OPTIONS "http://127.0.0.1:$H/completion" -H "Origin: $o" -H 'Access-Control-Request-Method: POST'
    [ "$CODE" = 200 ] && has_hdr 'access-control-allow-credentials: true' && ok || bad "preflight from $o: $CODE $HDRS"
done
# DNS rebinding's same-origin request (Origin = Host = the attacker's name) is caught by Host
head_req POST "http://127.0.0.1:$H/completion" -H "Host: evil.example:$H" -H "Origin: http://evil.example:$H" -d '{"prompt":"a"}'
[ "$CODE" = 403 ] && ok || bad "rebinding same-origin POST: $CODE"
[ "$(metric "$H" 'mlxcel_http_responses_total{code="403"}')" -ge 10 ] && ok || bad "403s not counted"
# widened on purpose
start h2 --allowed-hosts 'llm.internal,*.nope' --allowed-origins 'https://app.example.com'
[ "$(code "http://127.0.0.1:$PORT/health" -H 'Host: llm.internal:8080')" = 200 ] && ok || bad "--allowed-hosts"
[ "$(code "http://127.0.0.1:$PORT/health" -H 'Host: other.internal')" = 403 ] && ok || bad "--allowed-hosts lets others in"
head_req GET "http://127.0.0.1:$PORT/health" -H 'Origin: https://app.example.com'
[ "$CODE" = 200 ] && has_hdr 'access-control-allow-origin: https://app.example.com' && ok || bad "--allowed-origins: $CODE $HDRS"
[ "$(code "http://127.0.0.1:$PORT/health" -H 'Origin: https://other.example.com')" = 403 ] && ok || bad "unlisted origin"
timeout 10 "$FAKE" --port 0 --allowed-origins null >"$TMP/refused.log" 2>&1
[ $? = 2 ] && grep -q "cannot be allowed" "$TMP/refused.log" && ok || bad "--allowed-origins null must be refused"
# with a key: llama-server's CORS (any origin echoed, credentials in preflights), except null
start hk --api-key k1
head_req OPTIONS "http://127.0.0.1:$PORT/v1/completions" -H 'Origin: http://app.example' -H 'Access-Control-Request-Method: POST'
[ "$CODE" = 200 ] && has_hdr 'access-control-allow-origin: http://app.example' &&
    has_hdr 'access-control-allow-credentials: true' && ok || bad "keyed preflight: $CODE $HDRS"
head_req OPTIONS "http://127.0.0.1:$PORT/v1/completions" -H 'Origin: null' -H 'Access-Control-Request-Method: POST'
[ "$CODE" = 200 ] && has_hdr 'access-control-allow-origin: *' && ! grep -q '^access-control-allow-credentials' <<<"$HDRS" &&
    ok || bad "keyed preflight from null: $CODE $HDRS"
[ "$(code "http://127.0.0.1:$PORT/v1/models" -H 'Host: evil.example' -H 'Authorization: Bearer k1')" = 200 ] && ok ||
    bad "a keyed server answers any Host (the key is the defence)"

# ==== 5 + 6. strict framing; libmicrohttpd's own answers; no log flood ====
node "$HERE/raw_http.mjs" framing "$H" && ok || bad "raw framing checks"
node "$HERE/raw_http.mjs" mhd "$H" && ok || bad "raw libmicrohttpd checks"
before=$(grep -c 'incomplete request' "$TMP/h.log")
node "$HERE/raw_http.mjs" incomplete "$H" >/dev/null && ok || bad "incomplete requests"
sleep 0.5
n=$(grep -c 'incomplete request' "$TMP/h.log")
[ $((n - before)) -le 3 ] && ok || bad "60 dropped incomplete requests logged $((n - before)) lines (want <= 3 per 10 s)"
[ "$(code "http://127.0.0.1:$H/health")" = 200 ] && ok || bad "server alive after the raw requests"
# a JSON body of tiny values would cost its parse ~80x its size: refused before parsing
node -e 'process.stdout.write(JSON.stringify({content:"x",junk:Array(400000).fill({})}))' >"$TMP/objs.json"
[ "$(code "http://127.0.0.1:$H/tokenize" --data-binary @"$TMP/objs.json")" = 413 ] &&
    grep -q 'values, which would take about' "$TMP/body.txt" && ok || bad "JSON memory budget: $(cat "$TMP/body.txt")"

# a chunked body over --max-body-size: read to its end and answered 413 (libmicrohttpd cannot
# answer mid-body); one that streams on for more than 16 MiB past it has its connection closed
start b --max-body-size 64K
head -c 1M /dev/zero | tr '\0' ' ' >"$TMP/1m"
head -c 18M /dev/zero | tr '\0' ' ' >"$TMP/18m"
c=$(curl -sS -m 10 -o "$TMP/body.txt" -w '%{http_code}' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/1m" "http://127.0.0.1:$PORT/tokenize")
[ "$c" = 413 ] && grep -q -- '--max-body-size' "$TMP/body.txt" && ok || bad "chunked 16x the limit: $c"
c=$(curl -sS -m 20 -o /dev/null -w '%{http_code}' -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/18m" "http://127.0.0.1:$PORT/tokenize" 2>/dev/null)
case $c in 000|100) ok ;; *) bad "chunked 18 MiB past a 64K limit must be cut off (no final answer): $c" ;; esac
[ "$(code "http://127.0.0.1:$PORT/health")" = 200 ] && ok || bad "server alive after the cut-off upload"

# ==== 7. queue gauges back to 0, Retry-After, GET /v1/models/{id} ====
start q --metrics --parallel 2 --fake-step-ms 3 -a fake-model,second/name
Q=$PORT
# before the fix the gauges were set after a step, before the output thread lowered the
# count, and stayed at 1-3 once idle: a few rounds of bursts make that show
for round in 1 2 3 4; do
    CLIENTS=()
    for i in $(seq 24); do
        curl -sS -m 30 -o /dev/null "http://127.0.0.1:$Q/v1/completions" -d '{"prompt":"q'$i'","max_tokens":6,"ignore_eos":true}' &
        CLIENTS+=($!)
    done
    wait "${CLIENTS[@]}"
    sleep 0.3
    for g in mlxcel_queue_depth llamacpp:requests_deferred llamacpp:requests_processing mlxcel_requests_running; do
        v=$(metric "$Q" "$g")
        [ "$v" = 0 ] && ok || bad "round $round: $g = $v while idle (want 0)"
    done
done
[ "$(code "http://127.0.0.1:$Q/v1/models/fake-model")" = 200 ] && [ "$(jq_ 'o.id+","+o.object' <"$TMP/body.txt")" = fake-model,model ] &&
    ok || bad "GET /v1/models/fake-model: $(cat "$TMP/body.txt")"
[ "$(code "http://127.0.0.1:$Q/v1/models/second%2Fname")" = 200 ] && [ "$(jq_ 'o.id' <"$TMP/body.txt")" = second/name ] &&
    ok || bad "GET /v1/models/second%2Fname: $(cat "$TMP/body.txt")"
[ "$(code "http://127.0.0.1:$Q/models/fake-model")" = 200 ] && ok || bad "GET /models/{id}"
[ "$(code "http://127.0.0.1:$Q/v1/models/nope")" = 404 ] && [ "$(jq_ 'o.error.code+o.error.param' <"$TMP/body.txt")" = 404model ] &&
    ok || bad "unknown model id: $(cat "$TMP/body.txt")"
start r --parallel 1 --max-queue-depth 1 --fake-step-ms 300
curl -sS -m 30 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"a","max_tokens":4,"ignore_eos":true}' &
CLIENTS=($!)
sleep 0.5
curl -sS -m 30 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"b","max_tokens":1}' &
CLIENTS+=($!)
sleep 0.3
head_req POST "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"c","max_tokens":1}'
ra=$(sed -n 's/^retry-after: //p' <<<"$HDRS")
[ "$CODE" = 503 ] && [[ "$ra" =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && [ "$ra" -le 60 ] && ok || bad "queue full: $CODE, Retry-After '$ra'"
wait "${CLIENTS[@]}"
# A client that gave up on its queued request and asks again is not refused because of its own
# abandoned request: one slot, a queue of one, engine steps of 3 s (A's at 0-3, 3-6, 6-9 s).
# B queues at 3.5 s (A counted running since the first step) and hangs up at 4.5 s; C, at 5 s
# (no step has looked at B's socket since), must be queued and answered, not refused with 503.
start g --parallel 1 --max-queue-depth 1 --fake-step-ms 3000 --metrics
curl -sS -m 30 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"a","max_tokens":3,"ignore_eos":true}' &
CLIENTS=($!)
sleep 3.5
curl -sS -m 1 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"b","max_tokens":1}' 2>/dev/null
sleep 0.5
[ "$(code "http://127.0.0.1:$PORT/v1/completions" -m 30 -d '{"prompt":"c","max_tokens":1}')" = 200 ] && ok ||
    bad "a request behind an abandoned one: $(cat "$TMP/body.txt")"
wait "${CLIENTS[@]}"
[ "$(metric "$PORT" 'mlxcel_requests_finished_total{reason="cancelled"}')" = 1 ] && ok ||
    bad "the abandoned request was not cancelled: $(metric "$PORT" 'mlxcel_requests_finished_total{reason="cancelled"}')"

echo "harden_http: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
