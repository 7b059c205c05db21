#!/usr/bin/env bash
# GPU machine (~5 min): KV cache types on CUDA. test_cuda's attention and e2e groups (pools
# written with the CPU's bytes, attention against the CPU's on them, the demo model's greedy
# tokens with each type), then `mlxcel bench` of the 8B shape (dummy weights) with each type
# at B=1 and B=32 (prompt PROMPT, default 2048; gen 64): prefill and decode tok/s, and the
# memory high-water mark. GROUPS_ONLY= (empty) runs every test_cuda group; LONG_TYPES adds
# B=1 at a 16,384-token prompt for those types. Pack first: XZ=1 bash bench/pack_device.sh; carry .carry/devpack.tar.xz.
set -u
. bench/device_env.sh
diag_init
diag_test - "${GROUPS_ONLY-attn,e2e}"
grep -cE "pool bytes == CPU" "$D/test--.log" | sed 's/^/pool byte checks: /'
c=$(dummy_config llama-3.1-8b)
echo "type batch prefill_tok/s ttft decode_tok/s ... (mlxcel bench columns)"
for t in ${TYPES:-bf16 f16 q8_0 q4_0 turbo4 turbo3}; do
  timeout 150 .carry/dev/mlxcel bench -m "$c" --load-format dummy --device cuda \
    --prompt-tokens "${PROMPT:-2048}" --gen-tokens 64 --batch "${BATCHES:-1,32}" --repeat 1 \
    -ctk "$t" -ctv "$t" > "$D/bench-$t.log" 2>&1
  grep -E '^ +[0-9]+ ' "$D/bench-$t.log" | sed "s/^/$t /"
done
grep -m1 -E 'batch' "$D/bench-bf16.log"
for t in ${LONG_TYPES:-}; do # one long prompt at B=1: attention's share of the step grows
  timeout 150 .carry/dev/mlxcel bench -m "$c" --load-format dummy --device cuda \
    --prompt-tokens 16384 --gen-tokens 64 --batch 1 --repeat 1 -ctk "$t" -ctv "$t" \
    > "$D/long-$t.log" 2>&1
  grep -E '^ +[0-9]+ ' "$D/long-$t.log" | sed "s/^/$t@16k /"
done
echo "== end: $((SECONDS - T0)) s"
