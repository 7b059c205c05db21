#!/usr/bin/env bash
# GPU machine, one call (~5 min): decode attention's split merge after the session-15 ncu
# profile (attn_ncu.sh: the serial merge weights and the second cluster barrier were ~30% of
# a B=1 launch's stall samples): merge weights by warp shuffles, the cluster merge by DSMEM
# stores with one barrier. test_cuda in full; 8B / 1B bf16 and the synthetic 8B as MLX q4g64
# at B=1 against the build before (BIN=mlxcel-base), interleaved. Carry .carry/devpack.tar.xz
# (`BASE=<the commit before> XZ=1 bash bench/pack_device.sh`).
#   bash tools/diag/merge_check.sh
set -u
. bench/device_env.sh
diag_init
diag_b1_vs_base 2 2
echo "== done: $((SECONDS - T0)) s"
