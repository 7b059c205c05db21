#!/usr/bin/env bash
# Regression replay of one fuzz target (a CTest test, see fuzz/CMakeLists.txt): every file under
# the given directories (fuzz/corpus/<target>, fuzz/regress/<target>) runs through the target
# once, with the sanitizers of the fuzz build on (leaks included). Fails when the target crashes,
# leaks or reports on any of them, and when it has no input at all (every target is seeded).
# usage: replay.sh TARGET_BIN DIR...
set -uo pipefail
bin=$1
shift
files=()
for d in "$@"; do
    [ -d "$d" ] || continue
    while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$d" -type f ! -name '.*' -print0 | sort -z)
done
if [ ${#files[@]} -eq 0 ]; then
    echo "replay: no inputs for $(basename "$bin") in $*: every target needs a seed corpus" >&2
    exit 1
fi
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# -rss_limit_mb as fuzz-run (fuzz/run.sh); -timeout: one input may take this long at most.
if "$bin" -rss_limit_mb=2048 -timeout=60 "${files[@]}" >"$log" 2>&1; then
    echo "replay: $(basename "$bin"): ${#files[@]} inputs, all clean"
    exit 0
fi
rc=$?
grep -a -v '^Running: \|^Executed ' "$log" | tail -n 60
echo "replay: $(basename "$bin") FAILED (exit $rc) on an input above (the last 'Running:' line: $(grep -a '^Running: ' "$log" | tail -n 1))" >&2
exit 1
