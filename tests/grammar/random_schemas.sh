#!/usr/bin/env bash
# 1,000 random JSON schemas, each constraining generation from random logits over the real
# Llama 3 vocabulary (schema_random.c), every finished output checked by ajv (validate.mjs).
# usage: random_schemas.sh SCHEMA_RANDOM_BIN [N] [SEED]
set -uo pipefail
BIN=$1
N=${2:-1000}
SEED=${3:-20260101}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
TOK=$SRC/tests/fixtures/tokenizers/npm/llama3/tokenizer.json
[ -f "$TOK" ] || { echo "missing $TOK (tools/fetch_tokenizers.sh)"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ ! -d "$HERE/node_modules/ajv" ] || [ ! -d "$HERE/node_modules/ajv-formats" ]; then
    (cd "$HERE" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$TMP/npm.log" 2>&1) ||
        { echo "npm ci failed:"; cat "$TMP/npm.log"; exit 1; }
fi
"$BIN" "$TOK" "$N" "$SEED" "$TMP/out.jsonl" || { echo "schema_random failed"; exit 1; }
node "$HERE/validate.mjs" "$TMP/out.jsonl" "$N"
