#!/bin/sh
# One malformed checkpoint: `mlxcel inspect` must exit non-zero (not by a signal), print exactly
# one line on stderr, and that line must name the file (expect.txt line 1) and the problem
# (line 2). A sanitizer report or crash fails the test by its extra output or exit status.
# usage: check_bad.sh MLXCEL_BIN CASE_DIR
bin=$1 dir=$2
file_sub=$(sed -n 1p "$dir/expect.txt")
problem=$(sed -n 2p "$dir/expect.txt")
err=$(mktemp) out=$(mktemp)
trap 'rm -f "$err" "$out"' EXIT
"$bin" inspect -m "$dir" --json >"$out" 2>"$err"
rc=$?
fail() { echo "FAIL $dir: $*"; echo "--- stderr:"; cat "$err"; echo "--- stdout:"; cat "$out"; exit 1; }
[ "$rc" -ne 0 ] || fail "exit status 0"
[ "$rc" -lt 128 ] || fail "killed by a signal (status $rc)"
[ "$rc" -ne 134 ] || fail "aborted"
lines=$(wc -l <"$err")
[ "$lines" -eq 1 ] || fail "expected exactly one line on stderr, got $lines"
grep -qF -- "$file_sub" "$err" || fail "message does not name the file ('$file_sub')"
grep -qF -- "$problem" "$err" || fail "message does not name the problem ('$problem')"
[ ! -s "$out" ] || fail "printed something on stdout"
echo "ok $(cat "$err")"
