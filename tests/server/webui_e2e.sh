#!/usr/bin/env bash
# The built-in chat page (webui/, GET /): HTTP checks with curl, the page's DOM-free modules
# under node (webui/units.mjs), then a real browser (Debian's
# chromium, driven by puppeteer-core from npm: tests/server/webui/webui_e2e.mjs) against
#   - `mlxcel serve` with the demo model (models/wordnet-chat-16m) behind --api-key, and
#   - mlxcel-fake-server --fake-echo (replies repeat the user's message: HTML, <think>, a long
#     reply to stop; see the .mjs).
# Always kills what it started; every wait is bounded. WEBUI_SCREENSHOTS=DIR also writes the
# docs/ pictures (webui-desktop.png, webui-phone.png) into DIR. WEBUI_BROWSER=0 runs the HTTP
# checks only (the sanitizer build: no node, no chromium).
# usage: webui_e2e.sh MLXCEL_BIN FAKE_SERVER_BIN
set -uo pipefail
MLXCEL=$1
FAKE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
T_START=$(date +%s)

BROWSER=${WEBUI_BROWSER:-1}
CHROMIUM=${CHROMIUM:-$(command -v chromium || true)}
if [ "$BROWSER" = 1 ] && [ -z "$CHROMIUM" ]; then
    echo "webui_e2e: Debian's chromium is not installed (make deps installs it)"
    exit 1
fi
export CHROMIUM

# ==== npm: puppeteer-core (pinned by package-lock.json; downloads no browser) ====
if [ "$BROWSER" = 1 ] && [ ! -d "$HERE/webui/node_modules/puppeteer-core" ]; then
    (cd "$HERE/webui" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi

# start NAME COMMAND... : sets PORT once the server listens
start() {
    local name=$1; shift
    "$@" --port 0 --port-file "$TMP/$name.port" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}
# get URL [curl args] -> CODE, HDRS (lowercased names), BODY in $TMP/body
get() {
    local u=$1; shift
    rm -f "$TMP/body" # curl writes no file for an empty body
    CODE=$(curl -sS -m 30 -o "$TMP/body" -D "$TMP/headers.txt" -w '%{http_code}' "$u" "$@")
    HDRS=$(tr -d '\r' <"$TMP/headers.txt" | awk -F': ' 'NF>1{printf "%s: %s\n", tolower($1), substr($0, length($1)+3)}')
}
hdr() { grep -m1 "^$1: " <<<"$HDRS" | cut -d' ' -f2-; }

# ==== Servers ====
KEY=webui-test-key
OMP_NUM_THREADS=1 start real "$MLXCEL" serve -m "$ROOT/models/wordnet-chat-16m" --api-key "$KEY" -np 2 --metrics
REAL=http://127.0.0.1:$PORT
start fake "$FAKE" --fake-echo --fake-step-ms 10 -c 8192 -np 2 --metrics -a fake-echo
FAKE_URL=http://127.0.0.1:$PORT

# ==== HTTP: the page, its headers, its files ====
get "$REAL/"
[ "$CODE" = 200 ] && ok || bad "GET / without a key: $CODE (the page is public, as llama-server's)"
[ "$(hdr content-type)" = "text/html; charset=utf-8" ] && ok || bad "GET / content-type: $(hdr content-type)"
csp=$(hdr content-security-policy)
for d in "default-src 'none'" "script-src 'self'" "style-src 'self'" "connect-src 'self'" "frame-ancestors 'none'"; do
    [[ "$csp" == *"$d"* ]] && ok || bad "CSP lacks $d: $csp"
done
[[ "$csp" != *unsafe-inline* && "$csp" != *unsafe-eval* ]] && ok || bad "CSP allows inline/eval: $csp"
[ "$(hdr x-content-type-options)" = nosniff ] && ok || bad "no nosniff"
[ "$(hdr cache-control)" = no-cache ] && ok || bad "cache-control: $(hdr cache-control)"
etag=$(hdr etag)
[[ "$etag" =~ ^\"[0-9a-f]{32}\"$ ]] && ok || bad "etag: $etag"
cmp -s "$TMP/body" "$ROOT/webui/index.html" && ok || bad "GET / is not webui/index.html"
get "$REAL/" -H "If-None-Match: $etag"
[ "$CODE" = 304 ] && [ ! -s "$TMP/body" ] && ok || bad "If-None-Match: $CODE"
# every file the page loads is the committed source, with its type
for f in app.js:text/javascript chat.js:text/javascript markdown.js:text/javascript sse.js:text/javascript \
         style.css:text/css icon.svg:image/svg+xml; do
    get "$REAL/webui/${f%%:*}"
    [ "$CODE" = 200 ] && [[ "$(hdr content-type)" == "${f#*:}"* ]] && cmp -s "$TMP/body" "$ROOT/webui/${f%%:*}" &&
        ok || bad "GET /webui/${f%%:*}: $CODE $(hdr content-type)"
done
! grep -qiE 'src="https?:|href="https?:' "$ROOT/webui/index.html" && ok || bad "index.html loads something from the network"
get "$REAL/props"
[ "$CODE" = 401 ] && ok || bad "/props without the key: $CODE (the API stays behind the key)"
get "$REAL/webui/nothing.js"
[ "$CODE" = 401 ] && ok || bad "an unknown path is not public: $CODE"
CODE=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' -X POST "$REAL/" -H "Authorization: Bearer $KEY")
[ "$CODE" = 405 ] && ok || bad "POST /: $CODE"

# --no-webui (llama-server's flag) and LLAMA_ARG_NO_WEBUI: / answers 404 JSON, as before
start off "$FAKE" --no-webui
get "http://127.0.0.1:$PORT/"
[ "$CODE" = 404 ] && grep -q '"no route for GET /"' "$TMP/body" && ok || bad "--no-webui: $CODE $(cat "$TMP/body")"
get "http://127.0.0.1:$PORT/webui/app.js"
[ "$CODE" = 404 ] && ok || bad "--no-webui /webui/app.js: $CODE"
LLAMA_ARG_NO_WEBUI=1 start offenv "$FAKE"
get "http://127.0.0.1:$PORT/"
[ "$CODE" = 404 ] && ok || bad "LLAMA_ARG_NO_WEBUI=1: $CODE"
LLAMA_ARG_NO_WEBUI=1 start onflag "$FAKE" --webui
get "http://127.0.0.1:$PORT/"
[ "$CODE" = 200 ] && ok || bad "--webui over LLAMA_ARG_NO_WEBUI=1: $CODE (a flag wins)"
start offkey "$FAKE" --no-webui --api-key "$KEY"
get "http://127.0.0.1:$PORT/"
[ "$CODE" = 401 ] && ok || bad "--no-webui --api-key: GET / $CODE (no public page, so the key is needed)"

if [ "$BROWSER" = 1 ]; then
    # ==== The page's DOM-free parts (markdown tree, SSE reader, request body) under node ====
    node "$HERE/webui/units.mjs" && ok || bad "units.mjs"

    # ==== The browser ====
    SHOT_ARGS=()
    [ -n "${WEBUI_SCREENSHOTS:-}" ] && SHOT_ARGS=("$WEBUI_SCREENSHOTS")
    timeout 240 node "$HERE/webui/webui_e2e.mjs" "$REAL" "$KEY" "$FAKE_URL" "${SHOT_ARGS[@]}" && ok ||
        { bad "browser test (see above)"; tail -n 5 "$TMP/real.log" "$TMP/fake.log"; }
fi

# ==== Shutdown: every server ends cleanly on SIGTERM, with no sanitizer report ====
NAMES=(real fake off offenv onflag offkey)
for i in "${!PIDS[@]}"; do
    kill -TERM "${PIDS[$i]}" 2>/dev/null
    wait "${PIDS[$i]}"; RC=$?
    [ $RC = 0 ] && ok || bad "server ${NAMES[$i]}: exit status $RC after SIGTERM"
    log=$TMP/${NAMES[$i]}.log
    grep -q "AddressSanitizer\|LeakSanitizer\|runtime error" "$log" &&
        bad "server ${NAMES[$i]}: sanitizer report: $(grep -m3 -A5 'Sanitizer\|runtime error' "$log")" || ok
done
PIDS=()

echo "webui_e2e: $PASS passed, $FAIL failed ($(($(date +%s) - T_START)) s)"
[ "$FAIL" = 0 ]
