#!/usr/bin/env bash
# GPU machine (session 19): bench/attn_timeline.cu with the engine's q/k/v GEMV as producer
# (PROD_GEMV=1) under preferred carveouts (CARVEOUT): does attention enter before the GEMV ends?
# Carry .carry/tl.tar.xz (attn_tl_t built with -DATTN_TIMELINE, attn_tl_n without).
set -u
tar xJf .carry/tl.tar.xz -C .carry
for e in "PROD_GEMV=0" "PROD_GEMV=1" "PROD_GEMV=1 CARVEOUT=44" "PROD_GEMV=1 CARVEOUT=58" \
         "PROD_GEMV=1 CARVEOUT=100" "PROD_GEMV=1 CARVEOUT=44 ATTN_CLUSTER=0"; do
  echo "== $e"
  env $e timeout 60 .carry/tl/attn_tl_n 20 | sed 's/^/  /'
  env $e timeout 60 .carry/tl/attn_tl_t 5 | grep -v "^stand-ins\|^with att"
done
