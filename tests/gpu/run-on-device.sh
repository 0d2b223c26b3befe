#!/usr/bin/env bash
# tests/gpu/run-on-device.sh [RESULTS_DIR]: every check that needs a real GPU, in
# one go, well within 10 minutes on a 16-core machine with one or more NVIDIA GPUs.
#
#   1 build        trainlet + unit tests + examples/cpp-trainer (Release, -j$(nproc))
#   2 discovery    --nproc-per-node gpu finds what nvidia-smi lists (count, UUIDs)
#   3 preflight    --preflight --require-gpus on every GPU: NCCL init, checked
#                  all-reduce, bus bandwidth (figures in the results)
#   4 bounded      a gang whose second pod has no GPU: pod 0's real NCCL init is
#                  aborted at --preflight-timeout and the pod exits 75, on time
#   5 library      examples/cpp-trainer alone (no trainlet parent), then under
#                  trainlet with trainlet's NCCL unique id
#   6 pytorch      examples/pytorch/train.py --backend nccl under trainlet (skipped
#                  cleanly when `import torch` fails or torch sees no GPU)
#   7 unit         the unit tests (fakes), as a sanity check of this build
#
# Each step prints PASS/FAIL/SKIP and its time; results/summary.txt collects
# them with the measured figures. Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RESULTS=${1:-${OUT:-$ROOT/build-gpu/results}}
BUILD=$ROOT/build-gpu
mkdir -p "$RESULTS"
SUMMARY=$RESULTS/summary.txt
: >"$SUMMARY"
FAILED=0
TL=$BUILD/agent/trainlet

note() { echo "$*" | tee -a "$SUMMARY"; }
# step NAME TIMEOUT_S CMD...: runs CMD with a timeout, logs to RESULTS/NAME.log.
# CMD's status 0 = PASS, 77 = SKIP, anything else = FAIL.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$RESULTS/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  case $rc in
    0) note "PASS $name (${took}s)" ;;
    77) note "SKIP $name (${took}s): $(tail -n 1 "$RESULTS/$name.log")" ;;
    *) note "FAIL $name (${took}s, status $rc): $(tail -n 3 "$RESULTS/$name.log" | tr '\n' ' ')"
       FAILED=$((FAILED + 1)) ;;
  esac
}

note "run-on-device $(date -u +%FT%TZ) on $(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee "$RESULTS/nvidia-smi.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)

build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" &&
    cmake --build "$BUILD" -j"$(nproc)" &&
    test -x "$TL" && test -x "$BUILD/examples/cpp-trainer/cpp-trainer"
}
step build 420 build
test -x "$TL" || { note "no trainlet binary: stopping"; exit 1; }

discovery() {
  "$TL" --nproc-per-node gpu --log-level info -- sh -c 'echo "worker LOCAL_RANK=$LOCAL_RANK"' 2>&1
  local want=$NGPU got
  got=$("$TL" --nproc-per-node gpu -- sh -c 'echo w' 2>/dev/null | grep -c '^\[rank[0-9]*\]: w$')
  echo "nvidia-smi: $want GPU(s); trainlet started $got worker(s)"
  [ "$want" -gt 0 ] && [ "$got" -eq "$want" ]
}
step discovery 60 discovery

preflight() {
  "$TL" --nproc-per-node gpu --preflight --require-gpus --preflight-timeout 60 \
    --log-level debug -- true 2>&1
}
step preflight 120 preflight
grep -ho 'GPU preflight ok.*' "$RESULTS/preflight.log" | sed 's/^/  /' | tee -a "$SUMMARY"
grep -ho '"busbw_gbps":[0-9.]*' "$RESULTS/preflight.log" | sed 's/^/  /' | tee -a "$SUMMARY"

bounded() {
  # Pod 0 has GPU 0; pod 1 sees none and skips its preflight, so rank 1 never
  # joins: pod 0 must abort NCCL's init at the deadline (8 s) and exit 75.
  local port=$((20000 + RANDOM % 20000)) t0=$SECONDS rc
  CUDA_VISIBLE_DEVICES=0 "$TL" --node-rank 0 --nnodes 2 --master-addr 127.0.0.1 \
    --rdzv-port "$port" --master-port $((port + 1)) --preflight --preflight-timeout 8 \
    --grace-period 2 -- sleep 1 &
  local p0=$!
  CUDA_VISIBLE_DEVICES= "$TL" --node-rank 1 --nnodes 2 --master-addr 127.0.0.1 \
    --rdzv-port "$port" --master-port $((port + 1)) --preflight --preflight-timeout 8 \
    --grace-period 2 -- sleep 1 &
  local p1=$!
  wait "$p0"; rc=$?
  wait "$p1"
  echo "pod 0 exited $rc after $((SECONDS - t0)) s (want 75, within 8 s + start-up)"
  [ "$rc" -eq 75 ] && [ $((SECONDS - t0)) -le 30 ]
}
step bounded_init 90 bounded
grep -ho 'NCCL init timed out[^"]*' "$RESULTS/bounded_init.log" | head -1 | sed 's/^/  /' | tee -a "$SUMMARY"

library() {
  local ex=$BUILD/examples/cpp-trainer/cpp-trainer
  echo "== alone"
  env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$ex" --steps 100 || return 1
  echo "== under trainlet"
  "$TL" --nproc-per-node gpu -- "$ex" --steps 200
}
step library 120 library
grep -ho 'rank [0-9]*/[0-9]* final loss.*' "$RESULTS/library.log" | sed 's/^/  /' | tee -a "$SUMMARY"

pytorch() {
  local py=""
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      py=$p
      break
    fi
  done
  if [ -z "$py" ]; then
    echo "no python3 with torch and CUDA: skipped"
    return 77
  fi
  "$TL" --nproc-per-node gpu -- "$py" examples/pytorch/train.py --backend nccl --steps 30
}
step pytorch 240 pytorch
grep -ho 'final loss.*' "$RESULTS/pytorch.log" | head -4 | sed 's/^/  /' | tee -a "$SUMMARY"

unit() { ctest --test-dir "$BUILD" -LE e2e -j"$(nproc)" --output-on-failure; }
step unit 180 unit

note "failed steps: $FAILED"
exit "$FAILED"
