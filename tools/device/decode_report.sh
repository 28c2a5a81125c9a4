#!/usr/bin/env bash
# Issue 19's one device call: the decode-path GPU tests, the headline decode shapes with and
# without programmatic launch (BRAID_PDL=0) back to back, the rest of the decode matrix, the
# graph profile's idle share, and decode attention beside cuDNN. About 9 minutes on an H200.
# Usage (a build carried as tools/device/pack-build.sh makes it):
#   tar xJf .device/build.tar.xz -C .device && OUT=$OUT bash tools/device/decode_report.sh
# Writes at most 8 files to $OUT (the device tool's limit). PDL_AB=0 skips the BRAID_PDL=0 runs
# (about two minutes less); EXTRA_CMD, if set, runs last (e.g. a kernel bench the issue asks for).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/call_env.sh"  # ROOT, B, OUT, the libraries, the card
timeout 200 "$B/tests/braid_tests" \
  --gtest_filter='GemvChain*:*AttentionDecode*:ProgrammaticLaunch*:Families/Goldens.Cuda*:EngineGraph*:Fp8Experts*:FusedGemmGreedy*' \
  > "$OUT/tests.log" 2>&1
grep -E "^\[  FAILED  \]|^\[  PASSED" "$OUT/tests.log" | head
PDL_AB=${PDL_AB:-1} RUNS="qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256;qwen3-30b-a3b 1 256;deepseek-ocr-lm 1 256;deepseek-v2-lite 1 256;llama-3.1-8b-fp8 1 256;qwen3-30b-a3b-fp8 1 256" \
  BIN="$B/braidinfer" OUT="$OUT/ab" timeout 250 bash tools/device/decode.sh
RUNS="llama-3.2-1b 4 256;llama-3.2-1b 16 256;llama-3.1-8b 4 256;llama-3.1-8b 16 256;llama-3.2-1b 1 4096;llama-3.2-1b 1 32768;llama-3.1-8b 1 4096;llama-3.1-8b 1 32768" \
  BIN="$B/braidinfer" OUT="$OUT/matrix" timeout 110 bash tools/device/decode.sh --quick
timeout 40 "$B/braidinfer" profile --shape llama-3.2-1b --graph --steps 8 --prompt-tokens 255 \
  --json "$OUT/profile.json" > "$OUT/profile.log" 2>&1
grep -A3 "== decode" "$OUT/profile.log" | tail -3
# An MoE step with programmatic launch as shipped: the kernel table's "elapsed us/step" says what
# each kernel adds to the step when its duration overlaps its predecessor's.
timeout 60 "$B/braidinfer" profile --shape qwen3-30b-a3b-fp8 --graph --steps 8 --prompt-tokens 255 \
  --json "$OUT/profile_moe.json" > "$OUT/profile_moe.log" 2>&1
grep -A3 "== decode" "$OUT/profile_moe.log" | tail -3
BRAIDINFER_LIBRARY="$B/libbraid.so" PYTHONPATH=python timeout 75 \
  python3 -m braidinfer.compare_decode --json "$OUT/compare_decode.json" 2>&1 | tail -14
tar czf "$OUT/logs.tar.gz" -C "$OUT" profile.json profile.log profile_moe.json profile_moe.log \
  tests.log && rm -f "$OUT"/profile*.json "$OUT"/profile*.log "$OUT/tests.log"
if [[ -n "${EXTRA_CMD:-}" ]]; then eval "$EXTRA_CMD"; fi
