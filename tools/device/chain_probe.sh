#!/usr/bin/env bash
# One device call for gemv_chain's stream and stage boundaries (docs/perf/decode.md, version 18):
# the probe (tools/device/chain_probe.cpp, carried as .device/build/chain_probe: pack-build.sh's
# EXTRA), the chain's and the decode attention's tests, the batch-1 decode A/B (chain off, as
# built, and AB_VARIANTS), and Nsight Compute over one 8B layer chain. Writes <= 8 files.
# Usage: tar xJf .device/build.tar.xz -C .device && OUT=$OUT bash tools/device/chain_probe.sh
#   AB_VARIANTS  chain_ab.sh's VARIANTS (default "auto:BRAID_PDL=1 w4:BRAID_DECODE_WARPS=4")
#   AB_RUNS      its RUNS (default: the 0.5B, 1B and 8B shapes, batch 1, 256 keys)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
timeout 90 "$B/chain_probe" 2>&1 | tee -a "$OUT/probe.log"
timeout 150 "$B/tests/braid_tests" --gtest_filter='GemvChain*:*AttentionDecode*:EngineGraph*:*Golden*' \
  > "$OUT/checks.log" 2>&1
echo "tests: exit $? $(grep -E "^\[  FAILED  \]|^\[  PASSED|tests ran" "$OUT/checks.log" | tr '\n' ' ')"
VARIANTS=${AB_VARIANTS:-"auto:BRAID_PDL=1 w4:BRAID_DECODE_WARPS=4"} \
  RUNS=${AB_RUNS:-"qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256"} \
  MORE_RUNS="" SANITIZERS="" TESTS='GemvChain.CpuIsTheOpsInOrder' timeout 220 bash tools/device/chain_ab.sh
timeout 75 ncu --clock-control none --kernel-name regex:gemv_chain \
  --launch-skip 10 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section LaunchStats \
  "$B/chain_probe" llama-3.1-8b > "$OUT/ncu_8b.txt" 2>&1  # the 11th chain: an 8B layer
echo "ncu: exit $? $(grep -cE 'Duration|Throughput' "$OUT/ncu_8b.txt") metric lines"
ls -R "$OUT"
