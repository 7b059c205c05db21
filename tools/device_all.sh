#!/usr/bin/env bash
# One device call that does everything this session needs from the GPU machine, in parallel:
#   demo model: tokenizer -> training (MINUTES) -> transformers greedy samples   (GPU)
#   reference fixtures (tokenizers, templates, golden models), MLX quant reference (CPU)
#   CUDA kernel checks + timings (GPU, small)
# Carry: .carry/npm.tar.xz .carry/demo_data build-cuda/bench/cuda_ops_bench
# Results: $OUT/{demo.tgz,reference_outputs.tgz,*.log}
set -u
MINUTES=${MINUTES:-5}
tar xJf .carry/npm.tar.xz -C .carry
( MINUTES=$MINUTES bash tools/train_demo/run_device.sh .carry/demo_data /tmp/demo tok,train,sample \
    > /tmp/demo.log 2>&1; echo "demo rc=$?" >> /tmp/demo.log ) &
DEMO=$!
( bash tools/reference/run_all.sh /tmp/ref .carry/npm "$OUT/reference_outputs.tgz" > /tmp/ref.log 2>&1
  echo "ref rc=$?" >> /tmp/ref.log ) &
( python3 tools/reference/mlx_quant_ref.py /tmp/qref > /tmp/qref.log 2>&1; echo "qref rc=$?" >> /tmp/qref.log
  diff -r /tmp/qref/tests/fixtures/quant tests/fixtures/quant >> /tmp/qref.log 2>&1
  echo "diff rc=$?" >> /tmp/qref.log ) &
sleep 90   # let the tokenizer step start before the kernel bench shares the GPU
timeout 150 bash bench/run_cuda_ops.sh > /tmp/cuda.log 2>&1; echo "cuda rc=$?" >> /tmp/cuda.log
wait
tar czf "$OUT/demo.tgz" -C /tmp/demo . 2>/dev/null
cp /tmp/demo.log /tmp/ref.log /tmp/qref.log /tmp/cuda.log "$OUT/"
echo "==== ref"; cat /tmp/ref/run_all.summary 2>/dev/null; tail -2 /tmp/ref.log
echo "==== qref"; tail -3 /tmp/qref.log
echo "==== cuda"; tail -30 /tmp/cuda.log
echo "==== demo"; tail -40 /tmp/demo.log
