#!/usr/bin/env bash
# GPU machine: every test_cuda group with MLXCEL_QMV_BULK=1 (timestamped), then each quantized
# fixture's CUDA generate tokens with the streaming qmv off and on. Output: $OUT/check/.
set -u
ROOT=$PWD
. bench/device_env.sh
device_libs
D=${OUT:-/tmp}/check; mkdir -p "$D"; T0=$SECONDS
MLXCEL_QMV_BULK=1 timeout ${TEST_S:-300} stdbuf -oL .carry/dev/test_cuda . 2>&1 \
  | while IFS= read -r l; do echo "$((SECONDS - T0)) $l"; done > "$D/test_cuda.txt"
echo "test_cuda (MLXCEL_QMV_BULK=1): $(grep -c ' ok ' "$D/test_cuda.txt") ok, $(grep -c 'FAIL' "$D/test_cuda.txt") FAIL, last line: $(tail -1 "$D/test_cuda.txt")"
grep "FAIL\|group \|e2e quant" "$D/test_cuda.txt" | head -30
P=$(seq -s, 3 19)
for f in llama_q4g32 qwen2_q4g32 qwen3_moe_q4g32 mixtral_mlx_q4g32 gemma3_text_q4g32 llama_tiny_q4g32; do
  for b in 0 1; do
    MLXCEL_QMV_BULK=$b timeout 30 .carry/dev/mlxcel generate -m tests/fixtures/quant_parity/$f/q --device cuda \
      --prompt-ids $P -n 12 --json 2>/dev/null | grep -o '"tokens":[^]]*' > "$D/$f.$b" || echo "$f bulk=$b rc=$?"
  done
  cmp -s "$D/$f.0" "$D/$f.1" && echo "$f: same tokens ($(cat "$D/$f.1"))" || echo "$f: DIFFER: $(cat "$D/$f.0") vs $(cat "$D/$f.1")"
done
