#!/usr/bin/env bash
# GPU machine (session 19): the 8B q/k/v GEMV (50 MB a layer, B=1) in bench/attn_timeline.cu:
# plain, with the norm, with RoPE / KV write, both (PROD_GEMV=1/3/5/7), K split as tuned or
# forced (KSPLIT). "stand-ins only" = the GEMV and the o stand-in, a layer.
# Carry .carry/tl.tar.xz (attn_tl_n).
set -u
tar xJf .carry/tl.tar.xz -C .carry
for p in 1 3 5 7; do
  for k in "" 1 2 4; do
    echo "PROD_GEMV=$p KSPLIT=${k:-auto}: $(env PROD_GEMV=$p ${k:+KSPLIT=$k} timeout 60 \
      .carry/tl/attn_tl_n 20 | tr '\n' ' ' | sed 's/layer median//g; s/(16 splits, 20 x 32)//g')"
  done
done
