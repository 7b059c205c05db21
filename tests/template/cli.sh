#!/usr/bin/env bash
# mlxcel apply-template end to end: template from tokenizer_config.json, messages from a file and
# from stdin, --extra, --no-generation-prompt, --chat-template-file, and clear failures.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$tmp/tokenizer_config.json" <<'JSON'
{"chat_template": "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% if think is defined %}{{ think }}{% endif %}{% endif %}",
 "bos_token": {"content": "<s>"}, "eos_token": "</s>", "model_max_length": 1000000000000000019884624838656}
JSON
echo '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]' > "$tmp/m.json"

got=$("$bin" apply-template -m "$tmp" --messages "$tmp/m.json"; echo .)
[ "$got" = "$(printf '<s><user>hi\n<assistant>yo\n<assistant>.')" ] || fail "file messages: [$got]"

got=$("$bin" apply-template -m "$tmp" --no-generation-prompt < "$tmp/m.json"; echo .)
[ "$got" = "$(printf '<s><user>hi\n<assistant>yo\n.')" ] || fail "stdin messages: [$got]"

got=$(echo '{"messages": [{"role": "user", "content": "q"}], "think": "T"}' |
      "$bin" apply-template -m "$tmp" --messages - --extra '{"bos_token": "B"}'; echo .)
[ "$got" = "$(printf 'B<user>q\n<assistant>T.')" ] || fail "object input + --extra: [$got]"

printf '%s' '{{ messages | length }}|{{ raise_exception("nope") if messages | length > 5 }}' > "$tmp/o.jinja"
got=$("$bin" apply-template -m "$tmp" --chat-template-file "$tmp/o.jinja" --messages "$tmp/m.json")
[ "$got" = "2|" ] || fail "override file: [$got]"

printf '%s' '{{ raise_exception("roles must alternate") }}' > "$tmp/r.jinja"
if err=$("$bin" apply-template -m "$tmp" --chat-template-file "$tmp/r.jinja" --messages "$tmp/m.json" 2>&1); then
  fail "raise_exception did not fail"
fi
case $err in *"line 1: roles must alternate"*) ;; *) fail "raise_exception message: $err";; esac

printf '%s' $'ok\n{{ x | nosuchfilter }}' > "$tmp/u.jinja"
if err=$("$bin" apply-template --chat-template-file "$tmp/u.jinja" --messages "$tmp/m.json" 2>&1); then
  fail "unknown filter did not fail"
fi
case $err in *"chat template line 2: unknown filter 'nosuchfilter'"*) ;; *) fail "unknown filter message: $err";; esac

set +e
"$bin" apply-template -m "$tmp" --messages "$tmp/m.json" --extra '[1]' >/dev/null 2>&1; [ $? -eq 2 ] || fail "--extra non-object must exit 2"
"$bin" apply-template --messages "$tmp/m.json" >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing -m must exit 2"
echo '{"messages": 5}' | "$bin" apply-template -m "$tmp" >/dev/null 2>&1; [ $? -eq 1 ] || fail "bad messages must exit 1"
echo "template_cli: all checks passed"
