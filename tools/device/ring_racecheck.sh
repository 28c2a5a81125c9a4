#!/usr/bin/env bash
# Whether compute-sanitizer's racecheck follows gemv_chain's mbarrier ring (docs/perf/sanitizer.md):
# the ring alone in five variants (tools/device/racecheck_ring_probe.cu, built here with nvcc), then
# the chain's own tests under racecheck with lane 0's arrivals (as shipped) and with every lane's
# (BRAID_CHAIN_LANE_ARRIVALS=1). One summary line per run in $OUT/ring_racecheck.log.
# Usage, on the GPU machine with the carried build: OUT=$OUT bash tools/device/ring_racecheck.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
probe=$(mktemp -d)/probe
nvcc -O2 -arch=sm_90a -o "$probe" tools/device/racecheck_ring_probe.cu || exit 1
summary() { grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$1" | tail -n 1; }
{
  for v in bulk-lane0 bulk-all plain-lane0 plain-all racy; do
    "$probe" "$v"
    timeout 60 compute-sanitizer --tool racecheck "$probe" "$v" > "$OUT/probe_$v.log" 2>&1
    echo "racecheck probe $v: exit $? $(summary "$OUT/probe_$v.log")"
  done
  for arrivals in 0 1; do
    log="$OUT/chain_racecheck_lanes$arrivals.log"
    BRAID_CHAIN_LANE_ARRIVALS=$arrivals timeout "${CHAIN_TIMEOUT:-150}" compute-sanitizer \
      --tool racecheck "$B/tests/braid_tests" --gtest_filter="${CHAIN_FILTER:-GemvChain.Cuda*}" \
      > "$log" 2>&1
    echo "racecheck GemvChain lane_arrivals=$arrivals: exit $? $(summary "$log")" \
      "$(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ')"
  done
} 2>&1 | tee "$OUT/ring_racecheck.log"
(cd "$OUT" && tar czf racecheck_logs.tar.gz probe_*.log chain_racecheck_*.log &&
  rm -f probe_*.log chain_racecheck_*.log)
