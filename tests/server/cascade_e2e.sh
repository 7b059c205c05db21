#!/usr/bin/env bash
# Cascade attention end to end (docs/engine.md, "Cascade attention"): `mlxcel serve` on the demo
# model (models/wordnet-chat-16m: qwen3, paged KV with the prefix cache, real tokenizer) gets a
# request that puts a ~300-token system prompt in the prefix cache, then 6 concurrent greedy
# /completion requests under that prompt. Their texts and token counts must be the same with
# MLXCEL_CASCADE_ATTENTION=0, =1 (every shared piece walked once for its group of rows) and
# unset (auto); with =1 the debug log must show rows sharing pieces, and the requests must have
# hit the prefix cache (so their rows share the prompt's KV blocks).
# usage: cascade_e2e.sh MLXCEL_BIN
set -uo pipefail
MLXCEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"
M=$SRC/models/wordnet-chat-16m

SYS="You are a careful dictionary assistant. You answer questions about the meaning of English words, using the definitions of WordNet, a lexical database of English in which nouns, verbs, adjectives and adverbs are grouped into sets of cognitive synonyms, each expressing a distinct concept. Synonym sets are interlinked by means of conceptual, semantic and lexical relations. The resulting network of meaningfully related words and concepts can be navigated. Words that denote the same concept and are interchangeable in many contexts are grouped into unordered sets. Each of these sets is linked to other sets by a small number of conceptual relations. A set also contains a brief definition and, in most cases, one or more short sentences illustrating the use of the members of the set. Word forms with several distinct meanings are represented in as many distinct sets. Thus, each form-meaning pair in WordNet is unique. Always give one short definition, then stop. Do not repeat yourself, do not invent words, and keep every answer to a single sentence when you can. "
WORDS=(ocean river mountain forest music window)

# serve_start MODE (0, 1 or auto) -> PORT, SPID
serve_start() {
    local mode=$1 pf="$TMP/port.$1"
    if [ "$mode" = auto ]; then unset MLXCEL_CASCADE_ATTENTION
    else export MLXCEL_CASCADE_ATTENTION=$mode; fi
    MLXCEL_LOG_LEVEL=debug "$MLXCEL" serve -m "$M" -a demo --port 0 --port-file "$pf" -np 8 -c 512 \
        >"$TMP/log.$mode" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    unset MLXCEL_CASCADE_ATTENTION
    for _ in $(seq 150); do [ -s "$pf" ] && break; sleep 0.1; done
    PORT=$(cat "$pf" 2>/dev/null)
}
# ask PORT QUESTION -> {"content", tokens_predicted, tokens_cached} as one JSON line
ask() {
    local body="$TMP/body.$1.$2"
    node -e 'console.log(JSON.stringify({prompt: process.argv[1], n_predict: 24, temperature: 0}))' \
        "$SYS Question: what does \"$2\" mean? Answer:" >"$body"
    curl -sS -m 120 "http://127.0.0.1:$1/completion" -H 'Content-Type: application/json' --data-binary "@$body" |
        jq_ 'JSON.stringify({content: o.content, n: o.tokens_predicted, cached: o.tokens_cached, prompt: o.tokens_evaluated})'
}

for mode in 0 1 auto; do
    serve_start "$mode"
    if [ -z "$PORT" ]; then bad "cascade $mode: server did not start: $(head -c 2000 "$TMP/log.$mode")"; continue; fi
    ask "$PORT" "lake" >"$TMP/warm.$mode" # the system prompt into the prefix cache
    ASKS=()
    for i in "${!WORDS[@]}"; do
        ask "$PORT" "${WORDS[$i]}" >"$TMP/ans.$mode.$i" &
        ASKS+=($!)
    done
    wait "${ASKS[@]}"
    [ -n "${KEEP_LOG:-}" ] && cp "$TMP/log.$mode" "/tmp/cascade_e2e.log.$mode"
    kill "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    cat "$TMP"/ans."$mode".* >"$TMP/all.$mode"
done

# every answer is there, non-empty, under a prompt of more than one 256-key piece, from the cache
for i in "${!WORDS[@]}"; do
    A=$(cat "$TMP/ans.0.$i" 2>/dev/null)
    [ -n "$A" ] && [ "$(echo "$A" | jq_ 'o.n > 0 && o.content.length > 0 && o.prompt > 256 && o.cached >= 256')" = true ] &&
        ok || bad "request ${WORDS[$i]} (cascade 0): $A"
done
for mode in 1 auto; do
    for i in "${!WORDS[@]}"; do
        A=$(cat "$TMP/ans.0.$i" 2>/dev/null) B=$(cat "$TMP/ans.$mode.$i" 2>/dev/null)
        [ -n "$A" ] && [ "$A" = "$B" ] && ok || bad "request ${WORDS[$i]}: cascade $mode '$B' != cascade 0 '$A'"
    done
done
# cascade 1 shared pieces between rows (prefill chunks and concurrent decode rows); 0 never did
grep -Eq "cpu attention cascade: [1-9][0-9]* groups" "$TMP/log.1" && ok ||
    bad "cascade 1: no shared pieces in the debug log: $(grep -m3 'cascade' "$TMP/log.1")"
grep -q "cpu attention cascade:" "$TMP/log.0" && bad "cascade 0 logged cascade groups" || ok
echo "cascade answers: $(head -c 300 "$TMP/all.0")"

echo "cascade_e2e: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
