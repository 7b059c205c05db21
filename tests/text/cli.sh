#!/bin/sh
# `mlxcel tokenize` / `mlxcel detokenize` end to end on the real Llama 3 and Mistral tokenizers.
set -u
bin=${MLXCEL_BIN:?}
fx=${MLXCEL_SOURCE_DIR:?}/tests/fixtures/tokenizers/npm
fails=0
check() { # name, expected, actual
    if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: expected [$2], got [$3]"; fails=$((fails + 1)); fi
}
check "tokenize --json" "[9906, 1917]" "$("$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json" -p "Hello world" --json)"
check "tokenize plain" "9906 1917" "$("$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json" -p "Hello world")"
check "tokenize stdin" "9906 1917" "$(printf 'Hello world' | "$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json")"
check "tokenize -m --add-special" "1 22557 1526" "$("$bin" tokenize -m "$fx/mistral" --add-special -p "Hello world")"
check "detokenize --ids" "Hello world" "$("$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json" --ids 9906,1917)"
check "detokenize stdin json array" "Hello world" "$(echo '[9906, 1917]' | "$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json")"
check "detokenize specials" "<s> Hello world" "$("$bin" detokenize -m "$fx/mistral" --ids 1,22557,1526)"
check "detokenize --skip-special" "Hello world" "$("$bin" detokenize -m "$fx/mistral" --ids 1,22557,1526 --skip-special)"
# InternLM2's id 354 is the piece U+0000: it is text, not the end of it
check "detokenize U+0000 json" '"<s>\u0000n"' "$("$bin" detokenize --tokenizer "$fx/internlm2/tokenizer.json" --ids 1,354,265 --json)"
check "detokenize U+0000 bytes" 6 "$("$bin" detokenize --tokenizer "$fx/internlm2/tokenizer.json" --ids 1,354,265 | wc -c)"
check "detokenize --json" '"Hello world\n"' "$("$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json" --ids 9906,1917,198 --json)"
check "special token parsed" "151644 872" "$("$bin" tokenize --tokenizer "$fx/qwen3/tokenizer.json" -p "<|im_start|>user")"
case $("$bin" tokenize --tokenizer "$fx/qwen3/tokenizer.json" --special-as-text -p "<|im_start|>user") in
    *151644*) check "--special-as-text" "no 151644" "151644 present" ;;
    *) check "--special-as-text" ok ok ;;
esac
text='Grüße, 世界! 123 <|eot_id|>  end'
ids=$("$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json" -p "$text")
check "round trip" "$text" "$("$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json" --ids "$ids")"
"$bin" tokenize --help >/dev/null; check "tokenize --help" 0 $?
"$bin" detokenize --help >/dev/null; check "detokenize --help" 0 $?
"$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json" --bogus >/dev/null 2>&1; check "bad option" 2 $?
"$bin" tokenize -p x >/dev/null 2>&1; check "no tokenizer" 2 $?
err=$("$bin" tokenize --tokenizer /nonexistent.json -p x 2>&1); rc=$?
check "missing file rc" 1 $rc
case $err in *"/nonexistent.json"*) check "missing file message" ok ok ;; *) check "missing file message" "names the file" "$err" ;; esac
"$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json" --ids 99999999 >/dev/null 2>&1; check "id out of range" 1 $?
"$bin" detokenize --tokenizer "$fx/llama3/tokenizer.json" --ids 1,x >/dev/null 2>&1; check "bad id" 2 $?
out=$("$bin" tokenize --tokenizer "$fx/llama3/tokenizer.json" --bench "$fx/llama3/tokenizer_config.json" --repeat 2 --chunk 100)
case $out in *'"mb_per_s":'*) check "bench json" ok ok ;; *) check "bench json" "mb_per_s" "$out" ;; esac
exit $fails
