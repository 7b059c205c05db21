#!/usr/bin/env bash
# One device call: unpack the carried binaries, optional fixture regeneration (FIX=1), then
# bench/run_device.sh with the environment given. Carry: .carry/devpack.tar.xz
#   (made here by: bash bench/pack_device.sh && tar cJf .carry/devpack.tar.xz -C .carry dev)
set -u
T0=$SECONDS
[ -f .carry/devpack.tar.xz ] && tar xJf .carry/devpack.tar.xz -C .carry
if [ "${FIX:-0}" = 1 ]; then bash tools/device_fixtures2.sh 2>&1 | tail -12; fi
echo "== setup + fixtures: $((SECONDS - T0)) s"
BUDGET=$(( ${TOTAL:-560} - (SECONDS - T0) )) bash bench/run_device.sh
