#!/usr/bin/env bash
# Server hardening (issue 50, item 2): memory per request bounded and proportional to what it
# keeps. `mlxcel serve` on the demo model (models/wordnet-chat-16m, CPU); peak RSS growth of a
# request = VmHWM after it - VmRSS before it (VmHWM reset through /proc/PID/clear_refs, or
# VmRSS sampled every 10 ms where that file is not writable).
#   /tokenize with_pieces of a 16 MB body (was 270x): growth < 10x the body, answer complete
#   a 16 MB body of tiny JSON values (`{}`, ~80x in jansson): 413 before parsing, < 3x
#   RSS after the requests stays within 4x the body of its level before them (was +3.4 GB)
# Under AddressSanitizer (TEST_SANITIZED=1) the allocator's redzones and quarantine are not a
# production RSS: the same requests run on a 2 MB body and only the answers are checked.
# usage: harden_rss.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
MODEL=${MLXCEL_SOURCE_DIR:-$HERE/../..}/models/wordnet-chat-16m
SAN=${TEST_SANITIZED:-0}
[ "$SAN" = 1 ] && MB=2 || MB=16

"$MLXCEL" serve -m "$MODEL" --port 0 --port-file "$TMP/port" --max-body-size 17M >"$TMP/srv.log" 2>&1 &
SPID=$!
PIDS+=($SPID)
for _ in $(seq 300); do [ -s "$TMP/port" ] && break; sleep 0.1; done
[ -s "$TMP/port" ] || { echo "server did not start:"; cat "$TMP/srv.log"; exit 1; }
URL="http://127.0.0.1:$(cat "$TMP/port")"

# Bodies: seeded English-like text (the demo tokenizer's words), and a flood of `{}`.
node -e '
const fs = require("fs"), n = Number(process.argv[1]) * 1048576 - 256;
const words = "the of a plant genus family small tree flower water person used having relating to native large any form of an and in or with by body act".split(" ");
let x = 12345, parts = [];
for (let len = 0; len < 65536; ) { x = (x * 1103515245 + 12345) % 2147483648; const w = words[x % words.length]; parts.push(w); len += w.length + 1; }
const chunk = parts.join(" ") + " ", text = chunk.repeat(Math.ceil(n / chunk.length)).slice(0, n);
fs.writeFileSync(process.argv[2] + "/pieces.json", JSON.stringify({ content: text, with_pieces: true }));
fs.writeFileSync(process.argv[2] + "/plain.json", JSON.stringify({ content: text }));
fs.writeFileSync(process.argv[2] + "/objs.json", `{"content":"x","junk":[${"{},".repeat(Math.floor(n / 3) - 30)}{}]}`);
' "$MB" "$TMP"
# count PATTERN FILE: occurrences, read in blocks
count() { node -e '
const fs = require("fs"), pat = process.argv[1], fd = fs.openSync(process.argv[2]), buf = Buffer.alloc(1 << 20);
let n = 0, carry = "", k;
while ((k = fs.readSync(fd, buf)) > 0) { const s = carry + buf.toString("latin1", 0, k);
  for (let i = s.indexOf(pat); i >= 0; i = s.indexOf(pat, i + pat.length)) n++;
  carry = s.slice(Math.max(0, s.length - pat.length + 1)); }
console.log(n);' "$1" "$2"; }

rss() { awk '/^VmRSS/{print $2}' "/proc/$SPID/status"; }
hwm() { awk '/^VmHWM/{print $2}' "/proc/$SPID/status"; }
CLEAR=0
echo 5 >"/proc/$SPID/clear_refs" 2>/dev/null && CLEAR=1
# measure ROUTE BODY -> CODE, GROWTH_KB (peak over the baseline), AFTER_KB, BODY_KB
measure() {
    local route=$1 body=$2
    curl -sS -m 60 -o /dev/null "$URL/tokenize" -d '{"content":"warm up"}'
    sleep 1
    local base peak s=""
    base=$(rss)
    BASE=$base
    if [ $CLEAR = 1 ]; then
        echo 5 >"/proc/$SPID/clear_refs"
    else
        (peak=0; while :; do r=$(rss); [ "$r" -gt "$peak" ] && peak=$r && echo "$peak" >"$TMP/peak"; sleep 0.01; done) &
        s=$!
    fi
    CODE=$(curl -sS -m 600 -o "$TMP/out.json" -w '%{http_code}' "$URL$route" -H 'Content-Type: application/json' --data-binary @"$body")
    if [ $CLEAR = 1 ]; then peak=$(hwm); else kill "$s"; wait "$s" 2>/dev/null; peak=$(cat "$TMP/peak"); fi
    sleep 1
    GROWTH=$((peak - base))
    AFTER=$(rss)
    BODY_KB=$(($(stat -c %s "$body") / 1024))
    echo "$route $(basename "$body"): $CODE, body $BODY_KB kB, answer $(($(stat -c %s "$TMP/out.json") / 1024)) kB, peak RSS +$GROWTH kB ($(awk -v g=$GROWTH -v b=$BODY_KB 'BEGIN{printf "%.1f", g/b}')x), RSS $base -> $AFTER kB after"
}
under() { # under RATIO WHAT
    if [ "$SAN" = 1 ]; then ok; return; fi
    [ "$GROWTH" -lt $(($1 * BODY_KB)) ] && ok || bad "$2: peak RSS +$GROWTH kB for a $BODY_KB kB body (want < $1x)"
}

measure /tokenize "$TMP/pieces.json"
[ "$CODE" = 200 ] && ok || bad "/tokenize with_pieces: $CODE"
under 10 "/tokenize with_pieces"
BASE0=$BASE
# complete: every token is there (the plain route's count), the JSON closes, and the pieces
# put back together spell the text (checked on the first 2,000)
N_PIECES=$(count '{"id":' "$TMP/out.json")
curl -sS -m 600 -o "$TMP/plain.out" "$URL/tokenize" --data-binary @"$TMP/plain.json"
N_PLAIN=$(count ',' "$TMP/plain.out")
[ "$N_PIECES" = $((N_PLAIN + 1)) ] && [ "$(head -c 17 "$TMP/out.json")" = '{"tokens":[{"id":' ] &&
    [ "$(tail -c 4 "$TMP/out.json")" = '"}]}' ] && ok ||
    bad "with_pieces answer: $N_PIECES pieces for $((N_PLAIN + 1)) tokens, ends '$(tail -c 20 "$TMP/out.json")'"
[ "$(head -c 300000 "$TMP/out.json" | node -e '
let h = ""; process.stdin.on("data", (d) => (h += d)).on("end", () => {
  const a = JSON.parse(h.slice(0, h.lastIndexOf(",{\"id\":")) + "]}").tokens;
  const t = JSON.parse(require("fs").readFileSync(process.argv[1])).content;
  const s = a.slice(0, 2000).map((x) => x.piece).join("");
  console.log(a.length >= 2000 && t.startsWith(s));
});' "$TMP/plain.json")" = true ] && ok || bad "with_pieces pieces do not spell the text"
rm -f "$TMP/out.json"

measure /tokenize "$TMP/objs.json"
[ "$CODE" = 413 ] && grep -q 'would take about' "$TMP/out.json" && ok || bad "JSON budget: $CODE $(head -c 300 "$TMP/out.json")"
under 3 "a body of tiny JSON values"
if [ "$SAN" != 1 ]; then # what requests leave behind goes back to the system (malloc_trim)
    [ "$AFTER" -lt $((BASE0 + 4 * BODY_KB)) ] && ok ||
        bad "RSS $AFTER kB after the requests, $BASE0 kB before them (want < +4x the body; it was +200x)"
fi

[ "$(curl -sS -m 10 -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && ok || bad "server alive"
echo "harden_rss: $PASS passed, $FAIL failed (peak via $([ $CLEAR = 1 ] && echo clear_refs || echo sampling))"
[ "$FAIL" = 0 ]
