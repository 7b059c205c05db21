#!/usr/bin/env bash
# GPU machine, one call: decode attention with the split merge in a thread-block cluster
# (MLXCEL_ATTN_CLUSTER, default 16) against global partials (=0). test_cuda as is (its attn
# group compares both merges bitwise), attn + e2e groups with the cluster off; the attention
# op bench (auto, 1 stage, global merge); 8B and 1B bf16 and 8B q4g64 decode at B=1
# both ways. Short lines only.
#   bash tools/diag/attn_cluster_check.sh
set -u
. bench/device_env.sh
diag_init
diag_tests
MLXCEL_ATTN_CLUSTER=0 TEST_CUDA_ONLY=attn,e2e timeout 200 .carry/dev/test_cuda . \
  > "$D/test-nocl.log" 2>&1
echo "== test attn,e2e cluster off: rc $? $(tail -1 "$D/test-nocl.log"), $((SECONDS - T0)) s"
grep '^FAIL' "$D/test-nocl.log" | head -5 | cut -c1-160
timeout 200 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn .*B=(1|8|32) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' |
  cut -c1-80
grep -E "FAIL" "$D/attn.log" | head -3
SHAPES="llama-3.1-8b llama-3.2-1b" AB="- MLXCEL_ATTN_CLUSTER=0 MLXCEL_ATTN_STAGES=1" BATCH=1 \
  REPEAT=3 diag_ab 200
SHAPES="llama-3.1-8b" AB="- MLXCEL_ATTN_STAGES=1" BATCH=8,32 REPEAT=2 \
  diag_ab 200
echo "== bf16: $((SECONDS - T0)) s"
BATCH=1 AB="- MLXCEL_ATTN_CLUSTER=0" QUANT="4:64" BF16=0 REPEAT=2 \
  timeout 200 bash tools/diag/quant_b1.sh 2>&1 | grep -E "^llama|==" | awk '{print $1,$2,$3,$6,$12}'
echo "== done: $((SECONDS - T0)) s"
