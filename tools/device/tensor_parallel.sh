#!/usr/bin/env bash
# Tensor parallelism on a multi-GPU machine (issue 21): the GPU tests of the sharded engine, then
# batch-1 decode of a random Llama-3.1-8B at TP 1 and 2 (and 4 where present), in bf16 and with
# --quantize fp8, same call, through `braidinfer generate` (the one path generate and the engine
# share). Summaries in $OUT/tensor_parallel.log.
# Usage: BUILD_DIR=.device/build OUT=... bash tools/device/tensor_parallel.sh
set -uo pipefail
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-./device-out}
SHAPE=${SHAPE:-llama-3.1-8b}
NEW_TOKENS=${NEW_TOKENS:-128}
QUANTIZE=${QUANTIZE:-none fp8}  # each shape in bf16, then quantized to fp8 at load
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$BUILD_DIR/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"
gpus=$(nvidia-smi -L | wc -l)
{
  nvidia-smi --query-gpu=index,name --format=csv,noheader
  nvidia-smi topo -m
  CUDA_MODULE_LOADING=EAGER timeout 240 "$BUILD_DIR/tests/braid_tests" --gtest_filter="${TP_TESTS:-*TensorParallel*}" \
    > "$OUT/tensor_parallel_tests.log" 2>&1
  echo "tests exit status $?"
  grep -E '^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) *\]|Failure|rel error|no tensor-parallel|chose' \
    "$OUT/tensor_parallel_tests.log" | grep -v "RUN .*TensorParallelCpu"
  dir=/tmp/random-$SHAPE
  python3 "$(dirname "$0")/random_checkpoint.py" --shape "$SHAPE" --out "$dir"
  ids=$(seq -s, 1000 1127)  # a 128-token prompt
  for quantize in $QUANTIZE; do
    for tp in 1 2 4; do
      ((tp > gpus)) && continue
      echo "=== $SHAPE, --quantize $quantize, --tensor-parallel $tp"
      timeout 150 "$BUILD_DIR/braidinfer" generate --model "$dir" --device cuda --prompt-ids "$ids" \
        -n "$NEW_TOKENS" --ignore-eos --tensor-parallel "$tp" --quantize "$quantize" --print-ids \
        2>&1 | tail -n 2
    done
  done
} 2>&1 | tee "$OUT/tensor_parallel.log"
