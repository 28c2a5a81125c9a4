#!/usr/bin/env bash
# One device call that compares decode builds: the decode kernels' GPU tests with the new build,
# the headline decode shapes with each build in turn (BINS, as tools/device/decode.sh takes it),
# the rest of issue 19's matrix with the new build, and compute-sanitizer (memcheck, racecheck)
# over the tests of the kernels launched as programmatic dependents. About 9 minutes on an H200.
# Usage (a build carried as tools/device/pack-build.sh makes it, plus any older binaries):
#   tar xJf .device/build.tar.xz -C .device &&
#   BINS="landed=.device/variants/braidinfer-landed new=.device/build/braidinfer" OUT=$OUT \
#     bash tools/device/decode_ab.sh
# Writes at most 8 files to $OUT (the device tool's limit).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
B=${BUILD_DIR:-.device/build}
OUT=${OUT:-./device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$ROOT/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests find their data under the source folder they were built in.
[ -e /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
DECODE_TESTS=${DECODE_TESTS:-'ProgrammaticLaunch*:FusedGemm*:Gemv*:Argmax*:*AttentionDecode*:*Golden*:EngineGraph*'}
timeout 200 "$B/tests/braid_tests" --gtest_filter="$DECODE_TESTS" > "$OUT/tests.log" 2>&1
grep -E "^\[  FAILED  \]|^\[  PASSED|tests ran" "$OUT/tests.log" | head
BINS=${BINS:-new=$B/braidinfer} \
  RUNS=${AB_RUNS:-"qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256;qwen3-30b-a3b 1 256;deepseek-ocr-lm 1 256"} \
  OUT="$OUT/ab" timeout 240 bash tools/device/decode.sh
RUNS=${MATRIX_RUNS:-"llama-3.2-1b 1 32768;llama-3.1-8b 1 4096;llama-3.1-8b 1 32768"} \
  BIN="$B/braidinfer" OUT="$OUT/matrix" timeout 150 bash tools/device/decode.sh --quick
SANITIZE_FILTER=${SANITIZE_FILTER:-'ProgrammaticLaunch*:FusedGemm*:Argmax*'}
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/braid_tests" \
    --gtest_filter="$SANITIZE_FILTER" > "$OUT/sanitize_$tool.log" 2>&1
  echo "$tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -n 1)"
done
pkill -f "$B/tests/braid_tests" 2>/dev/null || true
tar czf "$OUT/logs.tar.gz" -C "$OUT" tests.log sanitize_memcheck.log sanitize_racecheck.log &&
  rm -f "$OUT/tests.log" "$OUT/sanitize_memcheck.log" "$OUT/sanitize_racecheck.log"
