#!/usr/bin/env bash
# GPU machine, second pass on the MLXCEL_QMV_BULK=1 stall: the launcher alone at the tiny K
# of the fixtures (test_cuda quant group, engine path off), then llama_q4g32 generate under
# launch settings that each remove one suspect, then a backtrace of a stalled process.
set -u
ROOT=$PWD
. bench/device_env.sh
device_libs
D=${OUT:-/tmp}/diag2; mkdir -p "$D"
B=.carry/dev/mlxcel; F=tests/fixtures/quant_parity/llama_q4g32/q
echo "== launcher at tiny K"
MLXCEL_QMV_BULK=0 TEST_CUDA_ONLY=quant timeout 90 .carry/dev/test_cuda . > "$D/test_quant.txt" 2>&1
echo "rc=$?"; grep -c "^ok" "$D/test_quant.txt"; grep "FAIL" "$D/test_quant.txt" | head; grep "x 64\]\|x 128\]" "$D/test_quant.txt" | grep bulk | head
run() { # label, env..., then prompt ids via P
  local label=$1; shift; local s=$SECONDS
  env MLXCEL_QMV_BULK=1 "$@" timeout 12 $B generate -m $F --device cuda --prompt-ids $P -n 6 --json > "$D/$label.json" 2> "$D/$label.err"
  local rc=$?
  printf '%-22s rc %-4s %3s s %s\n' "$label" $rc $((SECONDS - s)) "$(grep -o '"tokens":[^]]*' "$D/$label.json")" | tee -a "$D/table.txt"
}
P=$(seq -s, 3 19)
env MLXCEL_QMV_BULK=0 timeout 12 $B generate -m $F --device cuda --prompt-ids $P -n 6 --json 2>/dev/null | grep -o '"tokens":[^]]*' | sed 's/^/reference bulk=0 /' | tee "$D/table.txt"
run base
run nopdl MLXCEL_CUDA_PDL=0
run nographs MLX_CUDA_GRAPH_CACHE_SIZE=0
run nopdl_nographs MLXCEL_CUDA_PDL=0 MLX_CUDA_GRAPH_CACHE_SIZE=0
run blocking CUDA_LAUNCH_BLOCKING=1
run window1 MLXCEL_QMV_MULTIROW=1
P=3,4; run prompt2
P=$(seq -s, 3 11); run prompt9
P=$(seq -s, 3 40); run prompt38
echo "== backtrace of a stalled generate"
P=$(seq -s, 3 19)
MLXCEL_QMV_BULK=1 $B generate -m $F --device cuda --prompt-ids $P -n 6 > /dev/null 2>&1 &
pid=$!; sleep 6
CG=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null); G=$(command -v gdb)
echo "cuda-gdb: ${CG:-none} gdb: ${G:-none}"
if [ -n "$CG" ]; then
  timeout 90 "$CG" -p $pid -batch -ex "info cuda kernels" -ex "info cuda blocks" -ex "thread apply all bt 12" > "$D/bt.txt" 2>&1
elif [ -n "$G" ]; then
  timeout 60 "$G" -p $pid -batch -ex "thread apply all bt 12" > "$D/bt.txt" 2>&1
else
  for t in /proc/$pid/task/*; do echo "$t $(cat $t/wchan 2>/dev/null) $(cat $t/stat | cut -d' ' -f3)"; done > "$D/bt.txt"
fi
kill -9 $pid 2>/dev/null
grep -v "^\[New\|^$" "$D/bt.txt" | head -70
cat "$D/table.txt"
