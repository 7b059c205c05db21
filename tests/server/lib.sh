# Shared by the server end-to-end scripts (sourced): a temporary directory removed at exit,
# background processes (PIDS) killed and reaped at exit, pass/fail counters, a JSON reader.
TMP=$(mktemp -d)
PIDS=()
PASS=0
FAIL=0

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
# jq_ EXPR: evaluates the JavaScript expression EXPR with o = the JSON document on stdin
jq_() { node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const o=JSON.parse(s);console.log(String(eval(process.argv[1])))})' "$1"; }
# head_req METHOD URL [curl args...] -> CODE and HDRS (the response headers, names lowercased)
head_req() {
    local m=$1 u=$2; shift 2
    CODE=$(curl -sS -m 30 -o /dev/null -D "$TMP/headers.txt" -w '%{http_code}' -X "$m" "$u" "$@")
    HDRS=$(tr -d '\r' <"$TMP/headers.txt" | awk -F': ' 'NF>1{printf "%s: %s\n", tolower($1), substr($0, length($1)+3)}')
}
# has_hdr 'name: value' : HDRS holds exactly that header line
has_hdr() { grep -qxF -- "$1" <<<"$HDRS"; }
