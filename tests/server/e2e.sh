#!/usr/bin/env bash
# Server end-to-end test: starts the real HTTP server (over the deterministic fake backend) on
# ephemeral loopback ports and a Unix socket, drives it with curl and the official `openai` npm
# package, and always kills what it started. Every wait is bounded.
# usage: e2e.sh FAKE_SERVER_BIN MLXCEL_BIN
set -uo pipefail
FAKE=$1
MLXCEL=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
expect() { # expect DESCRIPTION COMMAND... : command must succeed
    local what=$1; shift
    if "$@"; then ok; else bad "$what"; fi
}

# start NAME ARGS... : starts a fake server, sets PORT (or waits for the socket)
start() {
    local name=$1; shift
    "$FAKE" --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}

# req METHOD PATH [BODY] [extra curl args...] -> sets CODE and BODY
req() {
    local m=$1 p=$2 d=${3:-}; shift 3 2>/dev/null || shift $#
    if [ -n "$d" ]; then
        BODY=$(curl -sS -m 30 -o - -w '\n%{http_code}' -X "$m" "http://127.0.0.1:$PORT$p" -H 'Content-Type: application/json' --data-binary "$d" "$@")
    else
        BODY=$(curl -sS -m 30 -o - -w '\n%{http_code}' -X "$m" "http://127.0.0.1:$PORT$p" "$@")
    fi
    CODE=${BODY##*$'\n'}
    BODY=${BODY%$'\n'*}
}
# err_case DESC EXPECTED_STATUS METHOD PATH BODY [PARAM_SUBSTRING]
err_case() {
    local what=$1 want=$2 m=$3 p=$4 d=$5 sub=${6:-}
    req "$m" "$p" "$d"
    if [ "$CODE" != "$want" ]; then bad "$what: status $CODE, want $want ($BODY)"; return; fi
    local shape
    shape=$(echo "$BODY" | jq_ 'typeof o.error.message==="string" && typeof o.error.type==="string" && o.error.code==='"$want")
    [ "$shape" = "true" ] && ok || bad "$what: error shape ($BODY)"
    if [ -n "$sub" ]; then echo "$BODY" | grep -q -- "$sub" && ok || bad "$what: message lacks '$sub' ($BODY)"; fi
}

# ==== npm client (pinned, git-ignored node_modules) ====
if [ ! -d "$HERE/node_modules/openai" ]; then
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi

# ==== Server A: routes, errors, openai client, concurrency ====
start a --metrics --parallel 16 -c 256 --fake-step-ms 2 --max-body-size 8K -a fake-model
A=$PORT
grep -q "decode path: native batched forward" "$TMP/a.log" && ok || bad "start-up log lacks the decode path line"
grep -q "decode storage backend: paged (" "$TMP/a.log" && ok || bad "start-up log lacks the storage backend + reason"

req GET /health; [ "$CODE" = 200 ] && [ "$BODY" = '{"status":"ok"}' ] && ok || bad "/health: $CODE $BODY"
req POST /tokenize '{"content":"hello"}'
[ "$CODE" = 200 ] && [ "$BODY" = '{"tokens":[104,101,108,108,111]}' ] && ok || bad "/tokenize: $CODE $BODY"
req POST /detokenize '{"tokens":[104,101,108,108,111]}'
[ "$BODY" = '{"content":"hello"}' ] && ok || bad "/detokenize: $BODY"
# a token whose text is U+0000 (InternLM2 has one) is not the end of the text
req POST /detokenize '{"tokens":[104,0,105]}'
[ "$BODY" = '{"content":"h\u0000i"}' ] && ok || bad "/detokenize with U+0000: $BODY"
req POST /tokenize '{"content":"a","with_pieces":true}'
[ "$BODY" = '{"tokens":[{"id":97,"piece":"a"}]}' ] && ok || bad "/tokenize with_pieces: $BODY"
req POST /apply-template '{"messages":[{"role":"user","content":"hi"}]}'
[ "$BODY" = '{"prompt":"<|user|>\nhi\n<|assistant|>\n"}' ] && ok || bad "/apply-template: $BODY"
req GET /props; [ "$(echo "$BODY" | jq_ 'o.total_slots+","+o.default_generation_settings.n_ctx')" = "16,256" ] && ok || bad "/props: $BODY"
req GET /slots; [ "$(echo "$BODY" | jq_ 'o.length')" = 16 ] && ok || bad "/slots: $BODY"

# /completion: non-stream and stream agree; the stream has no [DONE] (llama-server's shape)
req POST /completion '{"prompt":"The sky","n_predict":12,"temperature":0}'
C1=$(echo "$BODY" | jq_ 'o.content')
[ "$(echo "$BODY" | jq_ 'o.stop===true && o.tokens_predicted>0 && ["eos","limit"].includes(o.stop_type) && typeof o.timings.predicted_ms')" = number ] && ok || bad "/completion shape: $BODY"
S=$(curl -sN -m 30 "http://127.0.0.1:$A/completion" -d '{"prompt":"The sky","n_predict":12,"temperature":0,"stream":true}')
C2=$(echo "$S" | sed -n 's/^data: //p' | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{let t="";for(const l of s.trim().split("\n")){const o=JSON.parse(l);t+=o.content}console.log(t)})')
[ "$C1" = "$C2" ] && ok || bad "/completion stream text '$C2' != '$C1'"
echo "$S" | tail -2 | grep -q '"stop":true' && ok || bad "/completion stream does not end with stop:true"
echo "$S" | grep -q '\[DONE\]' && bad "/completion stream must not send [DONE]" || ok

# OpenAI SSE ends with [DONE]
S=$(curl -sN -m 30 "http://127.0.0.1:$A/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true}')
[ "$(echo "$S" | grep -v '^$' | tail -1)" = "data: [DONE]" ] && ok || bad "chat SSE does not end with data: [DONE]"

# Errors: status and OpenAI error shape
err_case "invalid JSON" 400 POST /v1/chat/completions '{"messages": [' 'invalid JSON'
err_case "body not an object" 400 POST /v1/completions '[1,2]' 'object'
err_case "U+0000 in a string" 400 POST /v1/completions '{"prompt":"a\u0000b"}' 'U+0000'
err_case "U+0000 in /tokenize" 400 POST /tokenize '{"content":"a\u0000b"}' 'U+0000'
err_case "temperature type" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}' 'temperature'
err_case "top_p range" 400 POST /v1/completions '{"prompt":"x","top_p":1.5}' 'top_p'
err_case "n > 128" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"n":129}' '"param":"n"'
err_case "prompts x n > 128" 400 POST /v1/completions '{"prompt":["a","b","c"],"n":50}' '"param":"n"'
err_case "best_of != n" 400 POST /v1/completions '{"prompt":"x","n":2,"best_of":3}' '"param":"best_of"'
err_case "bad list element" 400 POST /v1/completions '{"prompt":["a",{}]}' 'element 1'
err_case "a listed prompt too long" 400 POST /v1/completions "{\"prompt\":[\"a\",\"$(printf 'x%.0s' $(seq 300))\"]}" 'the prompt 1 has'
err_case "/completion takes one prompt" 400 POST /completion '{"prompt":["a","b"]}' '"param":"prompt"'
err_case "messages missing" 400 POST /v1/chat/completions '{"model":"m"}' 'messages'
err_case "bad role" 400 POST /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}' 'role'
err_case "max_tokens 0" 400 POST /v1/completions '{"prompt":"x","max_tokens":0}' 'max_tokens'
err_case "logit_bias key" 400 POST /v1/completions '{"prompt":"x","logit_bias":{"abc":1}}' 'logit_bias'
err_case "logit_bias id range" 400 POST /v1/completions '{"prompt":"x","logit_bias":{"99999":1}}' 'logit_bias'
err_case "top_logprobs without logprobs" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}' 'top_logprobs'
err_case "stream_options without stream" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}' 'stream_options'
err_case "stop type" 400 POST /v1/completions '{"prompt":"x","stop":5}' 'stop'
err_case "prompt token out of vocab" 400 POST /v1/completions '{"prompt":[1,2,100000]}' 'prompt'
LONG=$(head -c 300 /dev/zero | tr '\0' 'a')
err_case "prompt longer than the context" 400 POST /v1/completions "{\"prompt\":\"$LONG\"}" 'context'
err_case "unknown route" 404 GET /v1/nothing '' 'no route'
err_case "wrong method" 405 GET /v1/chat/completions ''
# a 405 names the methods the route takes (Allow, RFC 9110)
head_req GET "http://127.0.0.1:$PORT/v1/completions"
[ "$CODE" = 405 ] && has_hdr 'allow: POST, OPTIONS' && ok || bad "405 on a POST route without Allow: $CODE $HDRS"
head_req POST "http://127.0.0.1:$PORT/v1/models" -d '{}'
[ "$CODE" = 405 ] && has_hdr 'allow: GET, HEAD, OPTIONS' && ok || bad "405 on a GET route without Allow: $CODE $HDRS"
BIG=$(head -c 20000 /dev/zero | tr '\0' 'b')
err_case "body over --max-body-size" 413 POST /v1/completions "{\"prompt\":\"$BIG\"}" 'max-body-size'
CODE=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$A/v1/completions" -H 'Transfer-Encoding: chunked' --data-binary "{\"prompt\":\"$BIG\"}")
[ "$CODE" = 413 ] && ok || bad "chunked body over the limit: $CODE"

# logit_bias and the max_tokens family reach the engine
req POST /v1/completions '{"prompt":"q","max_tokens":5,"temperature":0,"logit_bias":{"122":100}}'
[ "$(echo "$BODY" | jq_ 'o.choices[0].text')" = "zzzzz" ] && ok || bad "logit_bias +100 forces the token: $BODY"

# the official openai client (chat, completions, models, 64 concurrent, disconnects)
if timeout 240 node "$HERE/openai_e2e.mjs" "http://127.0.0.1:$A"; then ok; else bad "openai npm e2e"; fi

# a template with no tool-call syntax cannot take tools (unless tool_choice is none)
err_case "tools without a call syntax" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}' '"param":"tools"'
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}'
[ "$CODE" = 200 ] && ok || bad "tool_choice none on a template without tools: $CODE $BODY"

# ==== Servers T, U: tool calls and reasoning over a real template with scripted replies ====
# (tests/fixtures/toolcalls/fake_script_*.json: the fake "model" writes the family's syntax)
FX="$HERE/../fixtures"
for fam in hermes:qwen2_5 deepseek:deepseek_v3; do
    name=${fam%%:*} tpl=${fam##*:}
    node -e 'const f=require(process.argv[1]);require("fs").writeFileSync(process.argv[2],f.chat_template)' \
        "$FX/templates/$tpl.json" "$TMP/$tpl.jinja"
    start "t_$name" -np 8 --chat-template-file "$TMP/$tpl.jinja" --fake-script "$FX/toolcalls/fake_script_$name.json"
    grep -q "chat: tool calls $( [ $name = hermes ] && echo hermes || echo deepseek_v3)" "$TMP/t_$name.log" && ok ||
        bad "start-up log lacks the tool-call syntax ($name)"
    if timeout 240 node "$HERE/tools_e2e.mjs" "http://127.0.0.1:$PORT" "$name"; then ok; else bad "tools e2e ($name)"; fi
done
# --reasoning-format (LLAMA_ARG_THINK, or LLAMA_ARG_REASONING_FORMAT) and --chat-template-kwargs:
# the server's defaults, which a request's reasoning_format / chat_template_kwargs override
node -e 'const f=require(process.argv[1]);require("fs").writeFileSync(process.argv[2],f.chat_template)' \
    "$FX/templates/qwen3.json" "$TMP/qwen3.jinja"
THINK='{"messages":[{"role":"user","content":"Think about it."}]'
for how in env:LLAMA_ARG_THINK env:LLAMA_ARG_REASONING_FORMAT flag:--reasoning-format; do
    kind=${how%%:*} var=${how#*:}
    if [ "$kind" = env ]; then
        env "$var=none" "$FAKE" --port 0 --port-file "$TMP/v.port" --chat-template-file "$TMP/qwen3.jinja" \
            --fake-script "$FX/toolcalls/fake_script_hermes.json" --chat-template-kwargs '{"enable_thinking":false}' \
            >"$TMP/v.log" 2>&1 &
    else
        "$FAKE" --port 0 --port-file "$TMP/v.port" --chat-template-file "$TMP/qwen3.jinja" --reasoning-format none \
            --fake-script "$FX/toolcalls/fake_script_hermes.json" --chat-template-kwargs '{"enable_thinking":false}' \
            >"$TMP/v.log" 2>&1 &
    fi
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$TMP/v.port" ] && break; sleep 0.1; done
    PORT=$(cat "$TMP/v.port")
    req POST /v1/chat/completions "$THINK}"
    [ "$(echo "$BODY" | jq_ 'o.choices[0].message.content.startsWith("<think>") && !("reasoning_content" in o.choices[0].message)')" = true ] &&
        ok || bad "$var=none leaves the thoughts in content: $BODY"
    req POST /v1/chat/completions "$THINK,\"reasoning_format\":\"deepseek\"}"
    [ "$(echo "$BODY" | jq_ 'o.choices[0].message.reasoning_content')" = "Let me think: 2 + 2 = 4." ] && ok ||
        bad "a request's reasoning_format wins over $var: $BODY"
    req POST /apply-template '{"messages":[{"role":"user","content":"hi"}]}'
    [ "$(echo "$BODY" | jq_ 'o.prompt.endsWith("<think>\n\n</think>\n\n")')" = true ] && ok || bad "--chat-template-kwargs: $BODY"
    req POST /apply-template '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":true}}'
    [ "$(echo "$BODY" | jq_ 'o.prompt.endsWith("assistant\n")')" = true ] && ok || bad "a request's chat_template_kwargs win: $BODY"
    kill "${PIDS[-1]}"
    rm -f "$TMP/v.port"
done
"$FAKE" --reasoning-format xml >"$TMP/bad.log" 2>&1
[ $? = 2 ] && grep -q -- '--reasoning-format: expected none, auto, deepseek or deepseek-legacy' "$TMP/bad.log" && ok ||
    bad "a bad --reasoning-format: $(cat "$TMP/bad.log")"
PORT=$A

# mlxcel loadtest against the same server
if timeout 120 "$MLXCEL" loadtest --url "http://127.0.0.1:$A" --concurrency 1,8 --requests 16 --prompt-tokens 16 --gen-tokens 8 --stream --json >"$TMP/lt.json" 2>"$TMP/lt.err"; then
    R=$(jq_ 'o.results.length+","+o.results.every(r=>r.failures===0&&r.output_tokens_per_s>0&&r.ttft_ms.p50>0&&r.itl_ms.p99>=r.itl_ms.p50)' <"$TMP/lt.json")
    [ "$R" = "2,true" ] && ok || bad "loadtest JSON: $(cat "$TMP/lt.json")"
else
    bad "loadtest failed: $(cat "$TMP/lt.err")"
fi

# /metrics: Prometheus text that promtool parses. llama-server's `llamacpp:` names contain ':'
# (promtool's lint flags that convention, nothing else may be flagged); the mlxcel_ families
# pass the lint entirely.
req GET /metrics
echo "$BODY" >"$TMP/metrics.txt"
if command -v promtool >/dev/null; then
    promtool check metrics <"$TMP/metrics.txt" >"$TMP/lint.txt" 2>&1
    rc=$?
    OTHER=$(grep -v "^llamacpp:[a-z_]* metric names should not contain ':'$" "$TMP/lint.txt" | grep -v '^$')
    { [ $rc = 0 ] || [ $rc = 3 ]; } && [ -z "$OTHER" ] && ok || bad "promtool on /metrics (rc $rc): $OTHER"
    grep -v '^# .* llamacpp:\|^llamacpp:' "$TMP/metrics.txt" | promtool check metrics >"$TMP/lint2.txt" 2>&1 &&
        ok || bad "promtool on the mlxcel_ families: $(cat "$TMP/lint2.txt")"
else
    bad "promtool not installed (Debian package prometheus; make deps installs it)"
fi
for m in llamacpp:prompt_tokens_total llamacpp:tokens_predicted_total llamacpp:prompt_seconds_total \
         llamacpp:tokens_predicted_seconds_total llamacpp:requests_processing llamacpp:requests_deferred \
         mlxcel_queue_depth mlxcel_batch_size mlxcel_prefill_chunks_total mlxcel_prefill_grants_total \
         mlxcel_kv_blocks_capacity mlxcel_kv_blocks_used mlxcel_kv_blocks_free mlxcel_prefix_cache_hits_total \
         mlxcel_prefix_cache_misses_total mlxcel_prefix_cache_reused_tokens_total mlxcel_decode_rows_total mlxcel_preemptions_total \
         mlxcel_time_to_first_token_seconds_count mlxcel_decode_tokens_per_second_count; do
    grep -q "^$m " "$TMP/metrics.txt" && ok || bad "/metrics lacks $m"
done
[ "$(grep '^llamacpp:tokens_predicted_total ' "$TMP/metrics.txt" | cut -d' ' -f2)" -gt 0 ] && ok || bad "no predicted tokens counted"

# ==== Server B: API keys and LLAMA_ARG_* variables (flags win over variables) ====
printf '# keys\nfilekey\n' >"$TMP/keys.txt"
LLAMA_API_KEY=envkey LLAMA_ARG_N_PARALLEL=3 LLAMA_ARG_CTX_SIZE=300 start b -c 200 --api-key-file "$TMP/keys.txt" --no-slots
err_case "no API key" 401 POST /v1/completions '{"prompt":"x","max_tokens":1}' 'API key'
req POST /v1/completions '{"prompt":"x","max_tokens":1}' -H 'Authorization: Bearer wrong'
[ "$CODE" = 401 ] && ok || bad "wrong key: $CODE"
req GET /health; [ "$CODE" = 200 ] && ok || bad "/health must not need a key: $CODE"
# CORS preflight: browsers send no Authorization with it, so it is answered before the key check
head_req OPTIONS "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Origin: http://app.example' \
    -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type,authorization,x-stainless-os'
[ "$CODE" = 200 ] && has_hdr 'access-control-allow-origin: http://app.example' &&
    has_hdr 'access-control-allow-credentials: true' && has_hdr 'access-control-allow-methods: GET, POST, OPTIONS' &&
    has_hdr 'access-control-allow-headers: content-type,authorization,x-stainless-os' && ok ||
    bad "CORS preflight with --api-key: $CODE $HDRS"
head_req OPTIONS "http://127.0.0.1:$PORT/no/such/route"
[ "$CODE" = 200 ] && has_hdr 'access-control-allow-origin: *' &&
    has_hdr 'access-control-allow-headers: content-type, authorization' && ok || bad "CORS preflight, no Origin: $CODE $HDRS"
req GET /props '' -H 'Authorization: Bearer filekey'
[ "$CODE" = 200 ] && [ "$(echo "$BODY" | jq_ 'o.total_slots+","+o.default_generation_settings.n_ctx')" = "3,200" ] && ok ||
    bad "--api-key-file key, LLAMA_ARG_N_PARALLEL, -c over LLAMA_ARG_CTX_SIZE: $CODE $BODY"
req GET /props '' -H 'Authorization: Bearer envkey'
[ "$CODE" = 401 ] && ok || bad "--api-key-file replaces LLAMA_API_KEY: $CODE"
# a disabled endpoint is 501 not_supported_error (llama-server), not an unknown route (404)
req GET /metrics '' -H 'Authorization: Bearer filekey'
[ "$CODE" = 501 ] && [ "$(echo "$BODY" | jq_ 'o.error.type+","+o.error.code')" = "not_supported_error,501" ] && ok ||
    bad "/metrics without --metrics: $CODE $BODY"
req GET /slots '' -H 'Authorization: Bearer filekey'
[ "$CODE" = 501 ] && echo "$BODY" | grep -q -- '--no-slots' && ok || bad "/slots with --no-slots: $CODE $BODY"

# ==== Server C: Unix socket ====
"$FAKE" --host "$TMP/srv.sock" >"$TMP/c.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/srv.sock" ] && break; sleep 0.1; done
R=$(curl -sS -m 10 --unix-socket "$TMP/srv.sock" http://x/v1/completions -d '{"prompt":"hi","max_tokens":3,"temperature":0}')
[ "$(echo "$R" | jq_ 'o.usage.completion_tokens>0')" = true ] && ok || bad "Unix socket: $R"

# ==== Server D: queue full -> 503, SSE keep-alive comments on a quiet stream ====
start d --parallel 1 --max-queue-depth 1 --fake-step-ms 1200 --sse-ping-interval 1
curl -sN -m 30 "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"a","max_tokens":3,"ignore_eos":true,"stream":true}' >"$TMP/d1.txt" &
P1=$!
sleep 1.6 # the first step (1.2 s) has admitted request 1
curl -sN -m 30 -o "$TMP/d2.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"b","max_tokens":1}' >"$TMP/d2.code" &
P2=$!
sleep 0.3
err_case "queue full" 503 POST /v1/completions '{"prompt":"c","max_tokens":1}' 'max-queue-depth'
err_case "queue cannot take n = 3" 503 POST /v1/completions '{"prompt":"c","max_tokens":1,"n":3}' 'sequences'
wait $P1 $P2
[ "$(cat "$TMP/d2.code")" = 200 ] && ok || bad "the queued request must be served: $(cat "$TMP/d2.code")"
grep -q '^: keep-alive' "$TMP/d1.txt" && ok || bad "no SSE keep-alive comment on a quiet stream"
grep -q 'data: \[DONE\]' "$TMP/d1.txt" && ok || bad "stream D1 incomplete"

# ==== Server E: a client that hangs up mid-stream has its sequence cancelled within a step ====
# 50 tokens at 0.3 s per step would take 15 s; curl dies (SIGPIPE) at its first write after
# `head` has exited, about one step after the first token.
start e --metrics --fake-step-ms 300
E=$PORT
curl -sN -m 30 "http://127.0.0.1:$E/v1/completions" -d '{"prompt":"a","max_tokens":50,"ignore_eos":true,"stream":true}' 2>/dev/null | head -n 1 >/dev/null
metric_e() { curl -sS -m 10 "http://127.0.0.1:$E/metrics" | sed -n "s/^$1 //p"; }
CANC=0
for _ in $(seq 40); do
    CANC=$(metric_e 'mlxcel_requests_finished_total{reason="cancelled"}')
    [ "${CANC:-0}" = 1 ] && break
    sleep 0.1
done
PRED=$(metric_e 'llamacpp:tokens_predicted_total')
[ "$CANC" = 1 ] && [ "${PRED%.*}" -lt 20 ] && ok || bad "hang-up mid-stream: cancelled=$CANC after ${PRED} of 50 tokens"
[ "$(metric_e mlxcel_kv_blocks_used)" = 0 ] && ok || bad "hang-up mid-stream: KV blocks still used"
# the same with n = 3: every choice of the hung-up response is cancelled
curl -sN -m 30 "http://127.0.0.1:$E/v1/completions" -d '{"prompt":"a","max_tokens":50,"ignore_eos":true,"stream":true,"n":3}' 2>/dev/null | head -n 1 >/dev/null
for _ in $(seq 40); do
    CANC=$(metric_e 'mlxcel_requests_finished_total{reason="cancelled"}')
    [ "${CANC:-0}" = 4 ] && break
    sleep 0.1
done
[ "$CANC" = 4 ] && ok || bad "hang-up mid-stream, n = 3: cancelled=$CANC (want 4)"
[ "$(metric_e mlxcel_kv_blocks_used)" = 0 ] && ok || bad "hang-up mid-stream, n = 3: KV blocks still used"

# A client that half-closes (shutdown(SHUT_WR)) after sending its request reads as a hang-up
# (cpp-httplib in llama-server does the same): its request is cancelled, and what it still reads
# says the client disconnected, not that the server is shutting down.
HALF=$(node -e 'const b=JSON.stringify({prompt:"a",max_tokens:50,ignore_eos:true});
const s=require("net").connect(+process.argv[1],"127.0.0.1",()=>s.end("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"+
  "Content-Type: application/json\r\nConnection: close\r\nContent-Length: "+b.length+"\r\n\r\n"+b));
let d="";s.setTimeout(20000,()=>s.destroy());s.on("data",x=>d+=x).on("close",()=>console.log(d.split("\r\n")[0]+"|"+d.slice(d.indexOf("\r\n\r\n")+4)))' "$E")
case "$HALF" in
"HTTP/1.1 499 "*'"message":"the request was cancelled: the client disconnected'*) ok ;;
*) bad "half-closed client: $HALF" ;;
esac
# A genuine shutdown still says so: SIGTERM while a request runs
start f --fake-step-ms 300
curl -sS -m 30 -o "$TMP/f.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"a","max_tokens":50,"ignore_eos":true}' >"$TMP/f.code" &
P1=$!
sleep 1
kill -TERM "${PIDS[-1]}"
wait $P1
[ "$(cat "$TMP/f.code")" = 503 ] && grep -q 'shutting down' "$TMP/f.txt" && ok ||
    bad "request cancelled by a shutdown: $(cat "$TMP/f.code") $(cat "$TMP/f.txt")"

echo "server e2e: $PASS passed, $FAIL failed"
[ $FAIL = 0 ]
