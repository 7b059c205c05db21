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
