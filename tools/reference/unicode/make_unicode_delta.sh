#!/usr/bin/env bash
# Regenerates src/text/tok_unicode_delta.h: the general categories of the code points that the
# Hugging Face tokenizers library knows (Unicode 16.0 for tokenizers 0.23.2) and this machine's
# PCRE2 does not (10.42: Unicode 14.0), so that tokenizer regexes classify them alike; and where
# its normalizers (older tables) and lowercase (newer) differ from this machine's utf8proc 2.8.
#   bash tools/reference/unicode/make_unicode_delta.sh     (needs gcc, libpcre2-dev, node)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$here/../node" && npm ci --silent)
gcc -O2 "$here/pcre2_unassigned.c" -o "$work/unassigned" -lpcre2-32
gcc -O2 "$here/utf8proc_forms.c" -o "$work/forms" -lutf8proc
"$work/unassigned" > "$work/cn.txt"
"$work/forms" > "$work/forms.txt"
node "$here/unicode_delta.mjs" "$work/cn.txt" "$work/forms.txt" "$repo/src/text/tok_unicode_delta.h"
