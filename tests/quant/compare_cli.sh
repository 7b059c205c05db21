#!/bin/sh
# mlxcel compare on the CPU: a model against itself agrees 100% with KL exactly 0 (also with
# --decode, one token per forward); the trained demo model converted to 8, 4, 3 and 2 bits
# (group 32) loses quality in that order, each within a band measured on it (below); a
# quantized fixture against its dequantized twin (bit-identical weights on the CPU) is again
# 100% / 0; bad flags fail.
# usage: compare_cli.sh MLXCEL_BIN SOURCE_DIR
set -eu
BIN=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
M=$SRC/tests/fixtures/ckpt/llama_tiny   # random weights: small margins, so 2-bit disagrees
IDS=2,10,20,30,40

field() { # field NAME FILE -> value of "NAME": in a one-line JSON object
    sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" "$2"
}

"$BIN" compare -m "$M" --ref "$M" --prompt-ids $IDS -n 48 --json > "$TMP/self.json"
[ "$(field top1_agreement_pct "$TMP/self.json")" = "100.000" ] || { echo "self: not 100%"; cat "$TMP/self.json"; exit 1; }
[ "$(field kl_max "$TMP/self.json")" = "0" ] || { echo "self: KL not 0"; cat "$TMP/self.json"; exit 1; }
# --decode: A runs one token per forward after the prompt, exactly as B generated: again 100% / 0
"$BIN" compare -m "$M" --ref "$M" --prompt-ids $IDS -n 16 --decode --json > "$TMP/dec.json"
[ "$(field decode "$TMP/dec.json")" = "true" ] && [ "$(field top1_agreement_pct "$TMP/dec.json")" = "100.000" ] &&
    [ "$(field kl_max "$TMP/dec.json")" = "0" ] || { echo "self --decode: expected 100% and KL 0"; cat "$TMP/dec.json"; exit 1; }

# Quantized demo model against its bf16 self, 128 teacher-forced positions after a 5-token
# prompt. Trained weights (random ones tie their logits, so agreement there measures rounding):
# measured (session of issue 53, CPU): top-1 % / KL mean (nats)
#   q8 100.0 / 1.18e-4   q4 98.44 / 1.92e-2   q3 94.53 / 6.45e-2   q2 70.31 / 1.19
# Bands a few points outside those, both sides: a conversion that ignores --q-bits (q2 as
# good as q4), or one that garbles the weights (q8 far from its bf16 source), fails.
D=$SRC/models/wordnet-chat-16m
DIDS=1,50,60,70,80
band() { # band NAME FILE AGREE_MIN AGREE_MAX KL_MIN KL_MAX
    awk -v t="$(field top1_agreement_pct "$2")" -v k="$(field kl_mean "$2")" -v a="$3" -v b="$4" \
        -v c="$5" -v d="$6" 'BEGIN { exit !(t >= a && t <= b && k >= c && k <= d) }' ||
        { echo "$1: expected top-1 in [$3, $4] % and KL mean in [$5, $6]"; cat "$2"; exit 1; }
    echo "$1: top-1 $(field top1_agreement_pct "$2") %, KL mean $(field kl_mean "$2")"
}
for b in 8 4 3 2; do
    "$BIN" convert --hf-path "$D" --mlx-path "$TMP/d$b" -q --q-bits $b --q-group-size 32 > /dev/null 2>&1 ||
        { echo "convert -q --q-bits $b failed"; exit 1; }
    "$BIN" compare -m "$TMP/d$b" --ref "$D" --prompt-ids $DIDS -n 128 --json > "$TMP/d$b.json"
    rm -rf "$TMP/d$b"
done
band "demo q8" "$TMP/d8.json" 99 100 0 1e-3
band "demo q4" "$TMP/d4.json" 95 99.9 5e-3 6e-2
band "demo q3" "$TMP/d3.json" 89 98 2e-2 0.2
band "demo q2" "$TMP/d2.json" 60 82 0.6 2.5

Q=$SRC/tests/fixtures/quant_parity/llama_q4g32
"$BIN" compare -m "$Q/q" --ref "$Q/deq" --prompt-ids 1,5,9 -n 24 --json > "$TMP/twin.json"
[ "$(field top1_agreement_pct "$TMP/twin.json")" = "100.000" ] && [ "$(field kl_max "$TMP/twin.json")" = "0" ] ||
    { echo "twin: expected 100% and KL 0"; cat "$TMP/twin.json"; exit 1; }

# -ctk / -ctv: model A's KV cache types against the reference's f32 cache, on the demo model
# (heads of 64): f32 by name is the reference exactly; q8_0 / q4_0 differ (KL > 0) and say so
D=$SRC/models/wordnet-chat-16m
"$BIN" compare -m "$D" --ref "$D" --prompt-ids 1,50,60,70 -n 16 -ctk f32 -ctv f32 --json > "$TMP/f32.json"
[ "$(field kl_max "$TMP/f32.json")" = "0" ] && [ "$(field cache_type_k "$TMP/f32.json")" = '"f32"' ] ||
    { echo "-ctk f32: expected KL 0"; cat "$TMP/f32.json"; exit 1; }
"$BIN" compare -m "$D" --ref "$D" --prompt-ids 1,50,60,70 -n 16 -ctk q8_0 --cache-type-v q4_0 --json > "$TMP/kvq.json"
[ "$(field cache_type_k "$TMP/kvq.json")" = '"q8_0"' ] && [ "$(field cache_type_v "$TMP/kvq.json")" = '"q4_0"' ] &&
    awk -v k="$(field kl_mean "$TMP/kvq.json")" 'BEGIN { exit !(k > 0) }' ||
    { echo "-ctk q8_0 -ctv q4_0: expected the types and KL > 0"; cat "$TMP/kvq.json"; exit 1; }
if "$BIN" compare -m "$M" --ref "$M" --prompt-ids 1 -ctk q8_0 > /dev/null 2>&1; then echo "q8_0 on heads of 8 accepted"; exit 1; fi

if "$BIN" compare -m "$M" --ref "$M" -n 4 > /dev/null 2>&1; then echo "no prompt accepted"; exit 1; fi
if "$BIN" compare -m "$M" --ref "$M" --prompt-ids 1 -n 0 > /dev/null 2>&1; then echo "-n 0 accepted"; exit 1; fi
echo "compare_cli: ok"
