#!/usr/bin/env bash
# One device call: unpack the carried binaries, optional fixture regeneration (FIX=1), then
# bench/run_device.sh with the environment given, then (TUNE=1) bench/tune_device.sh on the
# same synthetic 8B checkpoint with the time left. Everything under $OUT is packed into
# results.tgz at the end (the device tool returns at most 8 files); the .md tables stay beside.
# Carry: .carry/devpack.tar.xz
#   (made here by: bash bench/pack_device.sh && tar cJf .carry/devpack.tar.xz -C .carry dev)
set -u
T0=$SECONDS
TOTAL=${TOTAL:-560}
[ -f .carry/devpack.tar.xz ] && tar xJf .carry/devpack.tar.xz -C .carry
if [ "${FIX:-0}" = 1 ]; then bash tools/device_fixtures2.sh 2>&1 | tail -12; fi
echo "== setup + fixtures: $((SECONDS - T0)) s"
RESERVE=0
[ "${TUNE:-0}" = 1 ] && RESERVE=${TUNE_BUDGET:-150}
KEEP=1 BUDGET=$(( TOTAL - RESERVE - (SECONDS - T0) )) bash bench/run_device.sh
if [ "${TUNE:-0}" = 1 ]; then
  WORK=/tmp/mlxcel-dev KEEP=1 BUDGET=$(( TOTAL - (SECONDS - T0) )) bash bench/tune_device.sh
fi
OUTD=${OUT:-/tmp/mlxcel-out}
mkdir -p "$OUTD"
cp /tmp/mlxcel-dev/logs/*.log "$OUTD/" 2>/dev/null
( cd "$OUTD" && tar czf /tmp/results.tgz --exclude=results.tgz . ) && mv /tmp/results.tgz "$OUTD/results.tgz"
find "$OUTD" -maxdepth 1 -type f ! -name results.tgz ! -name '*.md' -delete
echo "== device_call done in $((SECONDS - T0)) s"
