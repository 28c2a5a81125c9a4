#!/usr/bin/env bash
# Batch-1 decode matrix of issue 4 on the GPU machine: the three headline shapes at a short
# context, batch 4 and 16 for the 1B and 7B shapes, contexts 4096 and 32768. One JSON per run,
# packed into $OUT/decode.tar.gz, the summaries in $OUT/decode.log.
# Usage: BIN=.device/build/braidinfer OUT=... bash tools/device/decode.sh [--quick]
set -uo pipefail
BIN=${BIN:-build/braidinfer}
OUT=${OUT:-./device-out}
mkdir -p "$OUT/decode"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
runs=(
  "qwen2.5-0.5b 1 256" "llama-3.2-1b 1 256" "llama-2-7b 1 256"
  "llama-3.2-1b 4 256" "llama-3.2-1b 16 256" "llama-2-7b 4 256" "llama-2-7b 16 256"
  "llama-3.2-1b 1 4096" "llama-3.2-1b 1 32768" "llama-2-7b 1 4096" "llama-2-7b 1 32768"
  "qwen3-30b-a3b 1 256"
)
status=0
for r in "${runs[@]}"; do
  read -r shape batch context <<<"$r"
  name="${shape}_b${batch}_c${context}"
  echo "=== $name"
  "$BIN" bench decode --shape "$shape" --batch "$batch" --context "$context" "$@" \
    --json "$OUT/decode/$name.json" > "$OUT/decode/$name.log" 2>&1 || status=1
  grep -E "ms/step|error" "$OUT/decode/$name.log"
done 2>&1 | tee "$OUT/decode.log"
tar czf "$OUT/decode.tar.gz" -C "$OUT" decode && rm -rf "$OUT/decode"
exit $status
