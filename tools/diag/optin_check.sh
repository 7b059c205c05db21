#!/usr/bin/env bash
# GPU machine, one call (~5 min): the tensor-core decode attention walk (MLXCEL_ATTN_TC) and the
# 3..8-row streaming GEMV on hi + lo x (MLXCEL_DENSE_GEMV_ROWS=2 MLXCEL_GEMV_TC_SPLIT_ROWS=8)
# against the settings before session 12 (CUDA-core walk; register-fed 3..8-row GEMV).
# Session 12 ran it with both as opt-ins (bench/results/2026-12-03-optin.md); they are the
# defaults since, so "-" below is both on. test_cuda as is (its attn group runs every decode
# case with the other walk against the CPU), quant + e2e groups with the old settings; the
# attention op bench ("attn auto", the default walk, against "attn cc", the CUDA-core one);
# then 8B / 1B bf16 decode at B=1, 4, 8, 32 four ways. Short lines only. Carry
# .carry/devpack.tar.xz.
#   bash tools/diag/optin_check.sh
set -u
. bench/device_env.sh
diag_init
OLDROWS=MLXCEL_DENSE_GEMV_ROWS=8,MLXCEL_GEMV_TC_SPLIT_ROWS=0
diag_tests "$OLDROWS" MLXCEL_ATTN_TC=0
grep -hE 'e2e .*differ' "$D"/test-*.log | sort | uniq -c | sort -rn | head -8 | cut -c1-120
timeout 150 .carry/dev/cuda_ops_bench --only attn > "$D/attn.log" 2>&1
echo "== op bench: rc $? $((SECONDS - T0)) s"
grep -E "time attn (auto|tc|cc) " "$D/attn.log" | sed -E 's/ +min +[0-9.]+ us//; s/ +/ /g' |
  cut -c1-80
grep -E "FAIL" "$D/attn.log" | head -3
SHAPES="llama-3.1-8b llama-3.2-1b" \
  AB="- $OLDROWS MLXCEL_ATTN_TC=0 $OLDROWS,MLXCEL_ATTN_TC=0" \
  BATCH=1,4,8,32 REPEAT=2 diag_ab 300
echo "== done: $((SECONDS - T0)) s"
