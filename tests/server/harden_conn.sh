#!/usr/bin/env bash
# Server hardening (issue 50, item 1), over the fake backend: connection exhaustion.
#   a flood of 1,100 idle connections from one address, then from ten, held while /health and
#   a keyed completion from other addresses must each answer within 1 s; per-address limits
#   with busy connections; the header deadline against silent, trickling and idle keep-alive
#   connections; 300 concurrent streams under the default limits.
# usage: harden_conn.sh FAKE_SERVER_BIN
set -uo pipefail
FAKE=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
# 1,100 client sockets plus the server's: raise the open-file limit as far as allowed
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 2600 ]; then
    echo "the open-file limit ($(ulimit -n), hard $(ulimit -Hn)) cannot hold the flood"; exit 1
fi

start() { # start NAME ARGS... -> PORT
    local name=$1; shift
    "$FAKE" --port 0 --port-file "$TMP/$name.port" "$@" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}
phase() { # phase NAME PORT [KEY]
    if node "$HERE/conn_flood.mjs" "$@"; then ok; else bad "phase $1"; fi
}

# defaults: --threads-http 1024, --max-connections-per-ip 512, --header-timeout 10
start one --api-key floodkey --metrics --parallel 16
phase flood-one "$PORT" floodkey
# 300 concurrent streams, each a busy connection from one address (the queue takes them all:
# this is about connections, not --max-queue-depth)
start streams --api-key floodkey --parallel 64 --max-queue-depth 1024
phase streams "$PORT" floodkey
start many --api-key floodkey --metrics --parallel 16
phase flood-many "$PORT" floodkey
start small --metrics --max-connections-per-ip 3 --header-timeout 1
phase per-ip "$PORT"
phase header "$PORT"
grep -q 'refused a connection from 127.0.0.1: its 3 connections (--max-connections-per-ip) are all busy' "$TMP/small.log" &&
    ok || bad "no log line for the refused connection"
for n in one streams many small; do
    grep -q "http: .* connections (--threads-http)" "$TMP/$n.log" && ok || bad "$n: start-up log lacks the limits"
done
echo "harden_conn: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
