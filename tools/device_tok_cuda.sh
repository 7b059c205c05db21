#!/usr/bin/env bash
# Device call: mlxcel's tokenizer next to Python `tokenizers` on the GPU machine's CPU (same run,
# same text, same chunk rule), then the first CUDA backend run (bench/run_device.sh).
# Carry: .carry/devpack.tar.xz (bench/pack_device.sh output, xz'd) and .carry/npm.tar.xz.
set -u
tar xJf .carry/devpack.tar.xz -C .carry && tar xJf .carry/npm.tar.xz -C .carry
LT=$(python3 -c 'import glob,os,site;print(next((os.path.dirname(f) for p in site.getsitepackages() for f in glob.glob(p+"/nvidia/**/libcublasLt.so.13*",recursive=True)),""))')
export LD_LIBRARY_PATH=$PWD/.carry/dev/lib:/usr/local/cuda/lib64:$LT
python3 tools/reference/bench_tokenizers.py - /tmp/tb --text-only > /dev/null
{
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo)"
  for n in llama3 qwen3 mistral; do
    .carry/dev/mlxcel tokenize --tokenizer .carry/npm/$n/tokenizer.json --bench /tmp/tb/bench_text.txt --repeat 3 --chunk 4096 | sed "s/^{/{\"name\": \"$n\", /"
  done
  python3 tools/reference/bench_tokenizers.py .carry/npm /tmp/tb2 | tail -30
} > "$OUT/tokbench.txt" 2>&1
cat "$OUT/tokbench.txt" | grep -E 'name|mb_per_s|host'
SHAPES=${SHAPES:-llama-3.2-1b} BUDGET=${BUDGET:-270} bash bench/run_device.sh
