#!/bin/bash
# Issue 53: regenerates the golden fixtures whose greedy continuations echo, in ONE command on
# the GPU machine (python3 with torch, transformers 5.x, safetensors; CPU only, no network).
#
#   bash tools/reference/regen_echo.sh          (it works in the repo root, wherever called from)
#
# Needs the mlxcel binary at .carry/dev/mlxcel with its libraries in .carry/dev/lib (unpacked
# here from .carry/devpack.tar.xz when .carry/dev is missing), or MLXCEL_BIN / MLXCEL_LIB.
# Stages (each time-limited; the whole run stays under 420 s):
#   1. tools/reference/make_fixtures.py for the echo families, one process each, in parallel
#      (each searches seeds / embedding scales until no case echoes: tiny models, a few
#      seconds per attempt, at most 24 attempts); a family that finishes replaces
#      tests/fixtures/models/<name>, one that fails or times out keeps the old files.
#      Beside it, tools/reference/verify_ckpt_fixtures.py on tests/fixtures/ckpt (checks only).
#   2. tests/fixtures/ckpt is committed already (tools/make_ckpt_fixtures.py is stdlib): only
#      checked to be what that script writes.
#   3. the quantized twins of the sources that changed (make_quant_parity_inputs.sh NAME...),
#      then tools/reference/quant_parity.py on each, in parallel. The others are not touched:
#      their sources did not change, so their q/, deq/ and expected.json stand. A twin whose
#      reference is refused (still an echo) or fails gets its old q/, deq/, expected.json back
#      (q/deq/expected must come from one source, or test_quant_parity fails).
#   4. tools/reference/check_fixtures.py, and tests/fixtures/echo_known.txt rewritten to the
#      echo cases that remain (its comment header kept).
#   5. every file under tests/fixtures that is new or changed (sha256 before / after; no git
#      needed) packed into $OUT/echo_fixtures.tgz (paths from the repo root: unpack with
#      `tar xzf echo_fixtures.tgz` there); a short log in $OUT/echo_logs.txt, the full logs
#      in $OUT/echo_logs_full.tgz. Exit status 1 when anything did not regenerate (named on
#      the last line of the log); the tarball holds what did.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/regen_echo_out} # the device tool sets OUT
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/regen_echo_XXXXXX)
LOG=$OUT/echo_logs.txt
: > "$LOG"
T0=$(date +%s)
DEADLINE=$((T0 + 400)) # 20 s of the 420 left for packing
FAILED="" # what did not regenerate (the exit status is 1 then; the tarball holds the rest)
FAMILIES="${FAMILIES:-gemma3_text qwen2}" # the echo families left (2026-12-08 run: the other five done)
CKPT_CHANGED="${CKPT_CHANGED:-}" # ckpt fixtures whose FIXTURE_SCALES changed (qwen3_sharded's twin is done)
QP_FROM_MODELS="llama qwen2 qwen3_moe mixtral gemma3_text" # make_quant_parity_inputs.sh's list

log() { echo "$*" | tee -a "$LOG"; }
stage() { log "== stage $1 at $(($(date +%s) - T0)) s: $2"; }
# limit CAP RESERVE: seconds a stage may take: CAP, or less so that RESERVE s stay before the
# deadline for the stages after it (at least 5)
limit() {
    local left=$((DEADLINE - $(date +%s) - $2))
    [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"
}

# torch on the CPU, one thread per process (the scripts set that too), no hub, no CUDA init
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
PY=(nice -n 5 env CUDA_VISIBLE_DEVICES= python3)

stage 0 "setup"
if [ -z "${MLXCEL_BIN:-}" ] && [ ! -x .carry/dev/mlxcel ] && [ -f .carry/devpack.tar.xz ]; then
    tar xJf .carry/devpack.tar.xz -C .carry || log "devpack: tar failed"
fi
REAL_BIN=${MLXCEL_BIN:-$ROOT/.carry/dev/mlxcel}
LIBDIR=${MLXCEL_LIB:-$ROOT/.carry/dev/lib}
# mlxcel's libraries only on mlxcel's path: its lib folder could shadow a library torch needs
BIN=$WORK/mlxcel
# shellcheck disable=SC2016  # the wrapper expands LD_LIBRARY_PATH when it runs
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$LIBDIR" "$REAL_BIN" > "$BIN"
chmod +x "$BIN"
if "$BIN" convert --help > "$WORK/bin_check.txt" 2>&1; then
    HAVE_BIN=1
    log "mlxcel: $REAL_BIN (libs $LIBDIR) runs"
else
    HAVE_BIN=0
    log "mlxcel: $REAL_BIN does NOT run: $(head -c 300 "$WORK/bin_check.txt" | tr '\n' ' ')"
    log "  (stage 3 skipped: the quant_parity twins keep their old files)"
    FAILED="$FAILED mlxcel"
fi
log "python3: $(python3 -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
snapshot() { find tests/fixtures -type f -print0 | sort -z | xargs -0 sha256sum; }
snapshot > "$WORK/before.sha"
log "tests/fixtures: $(wc -l < "$WORK/before.sha") files before"

stage 1 "make_fixtures.py for: $FAMILIES (parallel)"
T1=$(limit 240 110)
declare -A PID
for f in $FAMILIES; do
    timeout -k 5 "$T1" "${PY[@]}" tools/reference/make_fixtures.py "$WORK/ref_$f" --only "$f" \
        > "$WORK/make_fixtures_$f.log" 2>&1 &
    PID[$f]=$!
done
VARGS=()
[ "$HAVE_BIN" = 1 ] && VARGS=(--mlxcel "$BIN")
timeout -k 5 "$T1" "${PY[@]}" tools/reference/verify_ckpt_fixtures.py "$WORK/verify_ckpt" ${VARGS[@]+"${VARGS[@]}"} \
    > "$WORK/verify_ckpt.log" 2>&1 &
VPID=$!
MODELS_CHANGED=""
for f in $FAMILIES; do
    wait "${PID[$f]}"
    rc=$?
    src=$WORK/ref_$f/tests/fixtures/models/$f
    tries=$(grep -c "^\[$f\] seed " "$WORK/make_fixtures_$f.log")
    last=$(grep "^\[$f\] seed " "$WORK/make_fixtures_$f.log" | tail -1 | cut -c1-160)
    if [ "$rc" = 0 ] && [ -f "$src/expected.json" ]; then
        rm -rf "tests/fixtures/models/$f"
        cp -r "$src" "tests/fixtures/models/$f"
        MODELS_CHANGED="$MODELS_CHANGED $f"
        log "  $f: ok after $tries attempts: $last"
    else
        FAILED="$FAILED make_fixtures:$f"
        log "  $f: FAILED (exit $rc$([ "$rc" = 124 ] && echo ", timed out after $T1 s"), $tries attempts): old files kept"
        grep -v "^\[$f\] seed " "$WORK/make_fixtures_$f.log" | tail -4 | cut -c1-300 | sed 's/^/    /' | tee -a "$LOG"
    fi
done
wait "$VPID"
rc=$?
log "  verify_ckpt_fixtures.py: exit $rc ($(tail -1 "$WORK/verify_ckpt.log" | cut -c1-200))"

stage 2 "tests/fixtures/ckpt as tools/make_ckpt_fixtures.py writes it"
if timeout "$(limit 60 150)" python3 tools/make_ckpt_fixtures.py "$WORK/ckpt_check" > /dev/null 2>&1 &&
    diff -r "$WORK/ckpt_check/tests/fixtures/ckpt" tests/fixtures/ckpt > "$WORK/ckpt_diff.txt" 2>&1; then
    log "  same bytes"
else
    log "  DIFFERENT (or the script failed): $(head -3 "$WORK/ckpt_diff.txt" | tr '\n' ' ')"
fi

stage 3 "quant_parity twins of the changed sources"
QP_SRCS="$CKPT_CHANGED"
for m in $MODELS_CHANGED; do
    case " $QP_FROM_MODELS " in *" $m "*) QP_SRCS="$QP_SRCS $m" ;; esac
done
if [ "$HAVE_BIN" = 1 ]; then
    mkdir -p "$WORK/qp_backup"
    for s in $QP_SRCS; do
        d=tests/fixtures/quant_parity/${s}_q4g32
        [ -d "$d" ] && cp -a "$d" "$WORK/qp_backup/"
    done
    restore() { # restore NAME_q4g32
        rm -rf "tests/fixtures/quant_parity/$1"
        [ -d "$WORK/qp_backup/$1" ] && cp -a "$WORK/qp_backup/$1" tests/fixtures/quant_parity/
    }
    # shellcheck disable=SC2086  # QP_SRCS: one argument per name
    if timeout -k 5 "$(limit 60 40)" sh tools/reference/make_quant_parity_inputs.sh "$BIN" 4 32 $QP_SRCS \
        > "$WORK/make_quant_parity_inputs.log" 2>&1; then
        log "  converted: $QP_SRCS"
        T3=$(limit 150 10)
        declare -A QPID
        for s in $QP_SRCS; do
            d=tests/fixtures/quant_parity/${s}_q4g32
            timeout -k 5 "$T3" "${PY[@]}" tools/reference/quant_parity.py "$d/deq" "$d" \
                > "$WORK/quant_parity_$s.log" 2>&1 &
            QPID[$s]=$!
        done
        for s in $QP_SRCS; do
            wait "${QPID[$s]}"
            rc=$?
            if [ "$rc" = 0 ]; then
                log "  ${s}_q4g32: expected.json written, min_rel_margin per prompt: $(sed -n 's/.*min_rel_margin //p' "$WORK/quant_parity_$s.log" | tr '\n' ' ')"
            else
                restore "${s}_q4g32"
                FAILED="$FAILED quant_parity:$s"
                log "  ${s}_q4g32: quant_parity.py exit $rc$([ "$rc" = 124 ] && echo " (timed out after $T3 s)"): old q/ deq/ expected.json restored"
                grep -v "prompt .* tokens: min_rel_margin" "$WORK/quant_parity_$s.log" | tail -3 | cut -c1-400 | sed 's/^/    /' | tee -a "$LOG"
            fi
        done
    else
        log "  make_quant_parity_inputs.sh FAILED: $(tail -3 "$WORK/make_quant_parity_inputs.log" | tr '\n' ' ')"
        for s in $QP_SRCS; do restore "${s}_q4g32"; done
        FAILED="$FAILED make_quant_parity_inputs"
        log "  all twins restored"
    fi
fi

stage 4 "check_fixtures.py; echo_known.txt = the echoes left"
python3 tools/reference/check_fixtures.py . > "$WORK/check_before_list.txt" 2>&1
grep "check_fixtures:" "$WORK/check_before_list.txt" | head -3 | tee -a "$LOG"
if python3 tools/reference/check_fixtures.py . --list > "$WORK/echo_now.txt"; then
    was=$(grep -c '^[^#]' tests/fixtures/echo_known.txt)
    { grep '^#' tests/fixtures/echo_known.txt; cat "$WORK/echo_now.txt"; } > "$WORK/echo_known.new"
    cp "$WORK/echo_known.new" tests/fixtures/echo_known.txt
    log "  echo cases left: $(wc -l < "$WORK/echo_now.txt") (listed before: $was): $(tr '\n' ' ' < "$WORK/echo_now.txt")"
    python3 tools/reference/check_fixtures.py . --known tests/fixtures/echo_known.txt 2>&1 | tail -1 | tee -a "$LOG"
else
    log "  check_fixtures.py --list failed: echo_known.txt unchanged"
fi

stage 5 "pack"
snapshot > "$WORK/after.sha"
# changed or new: lines of after not in before; gone: paths of before not in after
comm -13 <(sort "$WORK/before.sha") <(sort "$WORK/after.sha") | sed 's/^[0-9a-f]*  //' | sort \
    > "$WORK/changed.txt"
comm -23 <(sed 's/^[0-9a-f]*  //' "$WORK/before.sha" | sort) \
    <(sed 's/^[0-9a-f]*  //' "$WORK/after.sha" | sort) > "$WORK/gone.txt"
tar czf "$OUT/echo_fixtures.tgz" -T "$WORK/changed.txt"
log "  $(wc -l < "$WORK/changed.txt") files new or changed -> $OUT/echo_fixtures.tgz ($(du -k "$OUT/echo_fixtures.tgz" | cut -f1) KiB):"
sed 's/^/    /' "$WORK/changed.txt" | tee -a "$LOG" > /dev/null
if [ -s "$WORK/gone.txt" ]; then
    log "  files GONE (delete them where the tarball is unpacked):"
    sed 's/^/    /' "$WORK/gone.txt" | tee -a "$LOG" > /dev/null
fi
(cd "$WORK" && tar czf "$OUT/echo_logs_full.tgz" --exclude='ref_*' --exclude='qp_backup' --exclude='ckpt_check' .)
stage end "done; failed: ${FAILED:- nothing}"
[ -z "$FAILED" ]
