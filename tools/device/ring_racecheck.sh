#!/usr/bin/env bash
# Whether compute-sanitizer's racecheck follows gemv_chain's mbarrier ring (docs/perf/sanitizer.md):
# the ring alone in five variants (tools/device/racecheck_ring_probe.cu, built here with nvcc), then
# the chain's own tests under racecheck. One summary line per run in $OUT/ring_racecheck.log.
# Usage, on the GPU machine with the carried build: OUT=$OUT bash tools/device/ring_racecheck.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
probe=$(mktemp -d)/probe
nvcc -O2 -arch=sm_90a -I src -o "$probe" tools/device/racecheck_ring_probe.cu || exit 1
summary() { grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$1" | tail -n 1; }
{
  for v in bulk-lane0 bulk-all plain-lane0 plain-all racy; do
    "$probe" "$v"
    timeout 60 compute-sanitizer --tool racecheck "$probe" "$v" > "$OUT/probe_$v.log" 2>&1
    echo "racecheck probe $v: exit $? $(summary "$OUT/probe_$v.log")"
  done
  log="$OUT/chain_racecheck.log"
  timeout "${CHAIN_TIMEOUT:-150}" compute-sanitizer --tool racecheck "$B/tests/braid_tests" \
    --gtest_filter="${CHAIN_FILTER:-GemvChain.Cuda*}" > "$log" 2>&1
  echo "racecheck GemvChain: exit $? $(summary "$log")" \
    "$(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ')"
} 2>&1 | tee "$OUT/ring_racecheck.log"
(cd "$OUT" && tar czf racecheck_logs.tar.gz probe_*.log chain_racecheck.log &&
  rm -f probe_*.log chain_racecheck.log)
