#!/usr/bin/env bash
# mlxcel loadtest end to end: length laws, the server breakdown from /metrics and failure
# causes against the HTTP server over the fake backend (2 slots, 6 clients: a queue forms),
# then a short run with length laws against the demo model on the CPU engine.
# usage: loadtest_e2e.sh FAKE_SERVER_BIN MLXCEL_BIN [fake|demo|all]
# (demo alone is left out of the sanitizer build: the demo model at -O0 takes 2 s a step there)
set -uo pipefail
PART=${3:-all}
FAKE=$1
MLXCEL=$2
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
. "$HERE/lib.sh"

# start NAME BIN ARGS... : starts a server on an ephemeral port, sets PORT
start() {
    local name=$1 bin=$2; shift 2
    "$bin" "$@" --port 0 --port-file "$TMP/$name.port" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 300); do [ -s "$TMP/$name.port" ] && break; sleep 0.1; done
    if [ ! -s "$TMP/$name.port" ]; then echo "server $name did not start:"; cat "$TMP/$name.log"; exit 1; fi
    PORT=$(cat "$TMP/$name.port")
}
# check FILE DESCRIPTION EXPR : EXPR (JavaScript, o = the JSON report) must be "ok"
check() {
    local r
    r=$(jq_ "$3" <"$1")
    [ "$r" = ok ] && ok || bad "$2: $r"
}

# ==== Fake backend: 2 slots, 6 clients, lengths from laws ====
if [ "$PART" != demo ]; then
start fake "$FAKE" --metrics -np 2 --max-batch-size 2 -c 128 --fake-step-ms 2
LAWS=(--prompt-tokens-dist uniform:4,40 --gen-tokens-dist lognormal:12,0.5,2,30)
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 6 --requests 18 "${LAWS[@]}" --seed 5 --stream \
    --metrics-interval 0.05 --json >"$TMP/a.json" 2>"$TMP/a.err"
[ $? = 0 ] && ok || bad "loadtest on the fake backend failed: $(cat "$TMP/a.err") $(head -c 3000 "$TMP/a.json")"
# Every request got exactly its drawn lengths; the breakdown adds up; a queue formed; nothing
# is held after the level.
check "$TMP/a.json" "fake backend: lengths and breakdown" '(()=>{const w=[],r=o.results[0],s=r.server,q=r.requested;
  if(o.prompt_dist!=="uniform:4,40"||o.gen_dist!=="lognormal:12,0.5,2,30"||o.prompt_tokens!==null)w.push("dists "+o.prompt_dist+" "+o.gen_dist);
  if(r.failures!==0||r.prompt_tokens_mismatch!==0)w.push("failures "+r.failures+" mismatch "+r.prompt_tokens_mismatch);
  if(r.prompt_tokens.mean!==q.prompt_tokens.mean||r.completion_tokens.mean!==q.gen_tokens.mean)w.push("usage vs drawn "+JSON.stringify([r.prompt_tokens,r.completion_tokens,q]));
  if(q.prompt_tokens.min<4||q.prompt_tokens.max>40||q.gen_tokens.min<2||q.gen_tokens.max>30||q.prompt_tokens.min===q.prompt_tokens.max)w.push("drawn "+JSON.stringify(q));
  if(!s)return "no server breakdown";
  if(s.peer!=="mlxcel"||!(s.steps>0)||!(s.wall_ms_per_step>0)||!(s.forward_ms_per_step>=0))w.push("steps "+JSON.stringify(s));
  if(Math.abs(s.rows_per_step*s.steps-(s.prefill_rows+s.decode_rows))>1e-6*s.steps)w.push("rows");
  if(!(s.seqs_per_step>0&&s.seqs_per_step<=2))w.push("seqs/step "+s.seqs_per_step);
  if(!(s.prefill_row_share>0&&s.prefill_row_share<1))w.push("prefill share "+s.prefill_row_share);
  if(!(s.queue_depth&&s.queue_depth.max>=1&&s.queue_depth.samples>=3))w.push("queue "+JSON.stringify(s.queue_depth));
  if(!(s.kv_blocks_used&&s.kv_blocks_used.max>0&&s.kv_blocks_used.capacity===2*Math.ceil(129/16)))w.push("kv "+JSON.stringify(s.kv_blocks_used));
  if(s.preemptions!==0||s.prefix_cache_hits!==0)w.push("preemptions/hits "+s.preemptions+" "+s.prefix_cache_hits);
  const a=s.after;if(!(a&&a.idle===true&&a.kv_blocks_used===0&&a.running===0&&a.queued===0))w.push("after "+JSON.stringify(a));
  return w.length?w.join("; "):"ok"})()'
# The same seed draws the same lengths whatever the concurrency; another seed other ones.
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 2 --requests 18 --warmup 6 "${LAWS[@]}" --seed 5 \
    --stream --no-metrics --json >"$TMP/b.json" 2>"$TMP/b.err" && ok || bad "second run: $(cat "$TMP/b.err")"
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 6 --requests 18 "${LAWS[@]}" --seed 6 --json \
    --no-metrics >"$TMP/c.json" 2>"$TMP/c.err" && ok || bad "third run: $(cat "$TMP/c.err")"
{ echo '['; cat "$TMP/a.json"; echo ','; cat "$TMP/b.json"; echo ','; cat "$TMP/c.json"; echo ']'; } >"$TMP/abc.json"
check "$TMP/abc.json" "lengths by seed" '(()=>{const q=o.map(d=>JSON.stringify(d.results[0].requested));
  if(q[0]!==q[1])return "same seed, other lengths: "+q[0]+" vs "+q[1];
  if(q[0]===q[2])return "seed 6 drew seed 5 lengths";
  return o[1].results[0].server===undefined?"ok":"--no-metrics still read /metrics"})()'
# Text report: the breakdown line and the empty-after line.
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 4 --requests 8 "${LAWS[@]}" --seed 5 --stream \
    >"$TMP/a.txt" 2>&1 && ok || bad "text run: $(cat "$TMP/a.txt")"
grep -q "^prompt uniform:4,40, output lognormal:12,0.5,2,30, seed 5$" "$TMP/a.txt" && grep -q "server (mlxcel): [0-9]* steps" "$TMP/a.txt" &&
    grep -q "after the level: KV blocks used 0, running 0, queued 0: empty" "$TMP/a.txt" && ok || bad "text report: $(cat "$TMP/a.txt")"
# A law that can exceed the context is refused before any request, naming the clamp.
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 1 --prompt-tokens-dist lognormal:24,0.6 --gen-tokens 8 \
    >/dev/null 2>"$TMP/d.err"
[ $? = 2 ] && grep -q "exceed the server's context of 128 tokens.*lognormal:MEAN,SIGMA,MIN,MAX" "$TMP/d.err" && ok ||
    bad "unclamped law over the context: $(cat "$TMP/d.err")"
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --prompt-tokens 8 --prompt-tokens-dist fixed:8 >/dev/null 2>"$TMP/e.err"
[ $? = 2 ] && grep -q "already given" "$TMP/e.err" && ok || bad "two prompt lengths: $(cat "$TMP/e.err")"

# ==== Failure causes from a real server: a queue limit answers 503 ====
start q "$FAKE" --metrics -np 1 --max-batch-size 1 -c 128 --fake-step-ms 5 --max-queue-depth 1
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 6 --requests 12 --prompt-tokens 8 --gen-tokens 16 \
    --stream --json >"$TMP/q.json" 2>"$TMP/q.err"
[ $? = 1 ] && ok || bad "loadtest with failed requests must exit 1"
check "$TMP/q.json" "503 by kind" '(()=>{const r=o.results[0],g=r.failures_by_kind;
  const h=g.find(x=>x.kind==="http"&&x.status===503);
  if(!h||!/^HTTP 503: /.test(h.example))return "no http 503 group: "+JSON.stringify(g);
  if(g.reduce((s,x)=>s+x.count,0)!==r.failures||r.failures<1)return "counts "+JSON.stringify(g)+" vs "+r.failures;
  return r.server&&r.server.after&&r.server.after.idle?"ok":"after "+JSON.stringify(r.server)})()'

fi

# ==== The demo model on the CPU engine: laws, usage = drawn, breakdown, empty after ====
if [ "$PART" != fake ]; then
# one OpenMP thread: the tiny model gains nothing from more on a loaded 2-core machine
start demo env OMP_NUM_THREADS=1 "$MLXCEL" serve -m "$SRC/models/wordnet-chat-16m" --metrics -np 4 --max-batch-size 4 \
    -c 96 --prefill-chunk-size 32
"$MLXCEL" loadtest --url "http://127.0.0.1:$PORT" --concurrency 4 --warmup 4 --requests 8 \
    --prompt-tokens-dist lognormal:24,0.6,4,64 --gen-tokens-dist uniform:4,16 --seed 3 --stream --json \
    --metrics-interval 0.1 >"$TMP/m.json" 2>"$TMP/m.err"
[ $? = 0 ] && ok || bad "loadtest on the demo model: $(cat "$TMP/m.err") $(head -c 3000 "$TMP/m.json")"
check "$TMP/m.json" "demo model" '(()=>{const w=[],r=o.results[0],s=r.server||{},q=r.requested;
  if(r.failures!==0||r.prompt_tokens_mismatch!==0||r.requests!==8)w.push("failures "+r.failures+" mismatch "+r.prompt_tokens_mismatch);
  if(r.completion_tokens.mean!==q.gen_tokens.mean||r.prompt_tokens.mean!==q.prompt_tokens.mean)w.push("usage vs drawn");
  if(!(r.output_tokens_per_s>0&&r.ttft_ms.p99>=r.ttft_ms.p50&&r.itl_ms.p99>=r.itl_ms.p50))w.push("figures");
  if(s.peer!=="mlxcel"||!(s.forward_ms_per_step>0)||!(s.rows_per_step>=1)||!(s.seqs_per_step<=4))w.push("breakdown "+JSON.stringify(s));
  const a=s.after;if(!(a&&a.idle===true&&a.kv_blocks_used===0&&a.running===0&&a.queued===0))w.push("after "+JSON.stringify(a));
  return w.length?w.join("; "):"ok"})()'
fi

echo "loadtest e2e: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
