#!/usr/bin/env bash
# GPU machine: where does MLXCEL_QMV_BULK=1 stall? Per quantized fixture, one CUDA generate
# (17-token prompt: prefill rows 17 through qmv_bulk) under a timeout; the first one that
# times out or fails goes through compute-sanitizer; then the test_cuda quant group with
# per-line timestamps. Needs .carry/dev from bench/pack_device.sh. Output: $OUT/diag/.
set -u
ROOT=$PWD; T0=$SECONDS; BUDGET=${TOTAL:-560}
. bench/device_env.sh
device_libs
D=${OUT:-/tmp}/diag; mkdir -p "$D"
B=.carry/dev/mlxcel
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "compute-sanitizer: ${CS:-none}"
P17=$(seq -s, 3 19)
bad=""
printf '%-24s %-6s %-4s %s\n' fixture bulk rc seconds > "$D/table.txt"
for f in llama_q4g32 qwen2_q4g32 qwen3_moe_q4g32 mixtral_mlx_q4g32 gemma3_text_q4g32; do
  for bulk in 0 1; do
    s=$SECONDS
    MLXCEL_QMV_BULK=$bulk timeout 40 $B generate -m tests/fixtures/quant_parity/$f/q --device cuda \
      --prompt-ids $P17 -n 8 --json > "$D/$f.bulk$bulk.json" 2> "$D/$f.bulk$bulk.err"
    rc=$?
    printf '%-24s %-6s %-4s %s\n' $f $bulk $rc $((SECONDS - s)) | tee -a "$D/table.txt"
    [ $bulk = 1 ] && [ $rc != 0 ] && [ -z "$bad" ] && bad=$f
  done
  cmp -s <(grep -o '"tokens":[^]]*' "$D/$f.bulk0.json") <(grep -o '"tokens":[^]]*' "$D/$f.bulk1.json") \
    && echo "$f tokens same" || echo "$f tokens DIFFER"
done
if [ -n "$bad" ] && [ -n "$CS" ]; then
  echo "== compute-sanitizer memcheck on $bad"
  MLXCEL_QMV_BULK=1 timeout 150 "$CS" --tool memcheck --print-limit 20 $B generate \
    -m tests/fixtures/quant_parity/$bad/q --device cuda --prompt-ids $P17 -n 4 > "$D/cs.txt" 2>&1
  echo "rc=$?" >> "$D/cs.txt"; tail -60 "$D/cs.txt"
fi
echo "== test_cuda quant, MLXCEL_QMV_BULK=1 [$((SECONDS - T0)) s]"
l=$((BUDGET - (SECONDS - T0))); [ $l -lt 20 ] && l=20
MLXCEL_QMV_BULK=1 TEST_CUDA_ONLY=quant timeout $l stdbuf -oL .carry/dev/test_cuda . 2>&1 \
  | while IFS= read -r line; do echo "$((SECONDS - T0)) $line"; done > "$D/test_quant.txt"
grep -n "FAIL\|fail\|group\|e2e" "$D/test_quant.txt" | tail -30
tail -5 "$D/test_quant.txt"
cat "$D/table.txt"
