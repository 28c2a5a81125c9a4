#!/usr/bin/env bash
# One device call that compares decode builds: the decode kernels' GPU tests with every build,
# the headline decode shapes with each build in turn (BINS, as tools/device/decode.sh takes it),
# the rest of issue 19's matrix with the carried build, and compute-sanitizer (memcheck,
# racecheck) over SANITIZE_FILTER's tests with every build. About 9 minutes on an H200 for one.
# Usage (a build carried as tools/device/pack-build.sh makes it, with its VARIANTS):
#   tar xJf .device/build.tar.xz -C .device && OUT=$OUT bash tools/device/decode_ab.sh
# BINS defaults to the carried build ("main") and each variant in .device/build/variants/NAME
# ("NAME"); the tests and sanitizers run on every one of them that has its braid_tests.
# Writes at most 8 files to $OUT (the device tool's limit). Settings: TEST_BUILDS=main tests and
# sanitizes the main build only; AB_ARGS goes to the A/B's decode.sh (e.g. --quick);
# MATRIX_RUNS="" skips the matrix; SANITIZE_TIMEOUT seconds a tool (default 120).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
# NAME=PATH of every build carried: the main one, then the variants.
builds=("main=$B")
for v in "$B"/variants/*/; do [[ -x "$v/braidinfer" ]] && builds+=("$(basename "$v")=${v%/}"); done
default_bins="" test_bins=()
for b in "${builds[@]}"; do
  default_bins+="${default_bins:+ }${b%%=*}=${b#*=}/braidinfer"
  [[ -x "${b#*=}/tests/braid_tests" && ( "${TEST_BUILDS:-all}" == all || "${b%%=*}" == main ) ]] &&
    test_bins+=("${b%%=*}=${b#*=}/tests/braid_tests")
done
DECODE_TESTS=${DECODE_TESTS:-'ProgrammaticLaunch*:FusedGemm*:Gemv*:Argmax*:*AttentionDecode*:*Golden*:EngineGraph*'}
for t in "${test_bins[@]}"; do
  timeout 200 "${t#*=}" --gtest_filter="$DECODE_TESTS" > "$OUT/tests_${t%%=*}.log" 2>&1
  echo "tests ${t%%=*}: $(grep -E "^\[  FAILED  \]|^\[  PASSED|tests ran" "$OUT/tests_${t%%=*}.log" | tr '\n' ' ')"
done
BINS=${BINS:-$default_bins} \
  RUNS=${AB_RUNS:-"qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256;qwen3-30b-a3b 1 256;deepseek-ocr-lm 1 256"} \
  OUT="$OUT/ab" timeout 240 bash tools/device/decode.sh ${AB_ARGS:-}
matrix=${MATRIX_RUNS-"llama-3.2-1b 1 32768;llama-3.1-8b 1 4096;llama-3.1-8b 1 32768"}
[[ -n "$matrix" ]] && RUNS=$matrix BIN="$B/braidinfer" OUT="$OUT/matrix" timeout 150 \
  bash tools/device/decode.sh --quick
SANITIZE_FILTER=${SANITIZE_FILTER:-'ProgrammaticLaunch*:FusedGemm*:Argmax*'}
for t in "${test_bins[@]}"; do
  for tool in memcheck racecheck; do
    log="$OUT/sanitize_${tool}_${t%%=*}.log"
    timeout "${SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 "${t#*=}" \
      --gtest_filter="$SANITIZE_FILTER" > "$log" 2>&1
    echo "$tool ${t%%=*}: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)"
  done
  pkill -f "${t#*=}" 2>/dev/null || true
done
(cd "$OUT" && tar czf logs.tar.gz tests_*.log sanitize_*.log && rm -f tests_*.log sanitize_*.log)
