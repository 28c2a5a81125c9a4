#!/usr/bin/env bash
# One device call for gemv_chain (docs/perf/decode.md, version 17): its GPU tests with the decode
# tests around it, the batch-1 decode shapes with the chain off (BRAID_GEMV_CHAIN=0) and on with
# several settings (ring depth BRAID_CHAIN_SLOTS, BRAID_SMEM_CARVEOUT), each case run by every
# variant in turn, and compute-sanitizer over the chain's tests. Writes <= 8 files.
# Usage (the build carried as tools/device/pack-build.sh makes it):
#   tar xJf .device/build.tar.xz -C .device && OUT=$OUT bash tools/device/chain_ab.sh
#   VARIANTS="NAME:ENV=V,ENV=V ..."  the chain's settings measured beside BRAID_GEMV_CHAIN=0
#   RUNS / MORE_RUNS  the cases (decode.sh's RUNS);  SANITIZERS  the compute-sanitizer tools
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
W=$(mktemp -d)
variant() {  # NAME ENV...: a braidinfer that runs with ENV set
  local name=$1
  shift
  printf '#!/bin/sh\nexec env %s %s "$@"\n' "$*" "$ROOT/$B/braidinfer" > "$W/$name"
  chmod +x "$W/$name"
  echo -n " $name=$W/$name"
}
bins="$(variant off BRAID_GEMV_CHAIN=0)"
# NAME:ENV=V,ENV=V ... (the default build's rule, the chain forced on, the carveout asked for)
default_variants="auto:BRAID_PDL=1 forced:BRAID_GEMV_CHAIN=1 carve:BRAID_SMEM_CARVEOUT=max"
for v in ${VARIANTS:-$default_variants}; do
  settings=${v#*:}
  bins+="$(variant "${v%%:*}" ${settings//,/ })"
done
TESTS=${TESTS:-'GemvChain*:ProgrammaticLaunch*:*Golden*:EngineGraph*:LLMEngineCuda*'}
timeout 300 "$B/tests/braid_tests" --gtest_filter="$TESTS" > "$OUT/tests.log" 2>&1
echo "tests: exit $? $(grep -E "^\[  FAILED  \]|^\[  PASSED|tests ran" "$OUT/tests.log" | tr '\n' ' ')"
BINS=$bins RUNS=${RUNS:-"qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256"} \
  OUT="$OUT/ab" timeout 300 bash tools/device/decode.sh --quick
more=${MORE_RUNS-"llama-3.2-1b 1 4096;qwen2.5-0.5b 1 4096"}  # MORE_RUNS="": none
[[ -n "$more" ]] && BINS="$(variant off2 BRAID_GEMV_CHAIN=0)$(variant on BRAID_GEMV_CHAIN=1)" \
  RUNS=$more OUT="$OUT/more" timeout 150 bash tools/device/decode.sh --quick
for tool in ${SANITIZERS-memcheck racecheck}; do
  log="$OUT/sanitize_$tool.log"
  timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/braid_tests" \
    --gtest_filter='GemvChain.Cuda*' > "$log" 2>&1
  echo "$tool: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)"
done
(cd "$OUT" && tar czf logs.tar.gz tests.log $(ls sanitize_*.log 2>/dev/null) && rm -f tests.log sanitize_*.log)
