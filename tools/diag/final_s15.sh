#!/usr/bin/env bash
# GPU machine, one call (~5 min): session 15's end state against its start (BIN=mlxcel-base,
# ef6b073: the rope_targets merge and the diagnostics must not move anything). test_cuda in
# full; 8B / 1B bf16 and the synthetic 8B as MLX q4g64 at B=1, interleaved, median of 2.
# Carry .carry/devpack.tar.xz (`BASE=ef6b073 XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/final_s15.sh
set -u
. bench/device_env.sh
diag_init
diag_b1_vs_base 3 2
echo "== done: $((SECONDS - T0)) s"
