#!/usr/bin/env bash
# Batch-1 decode matrix of issue 19 on the GPU machine: the headline shapes at a short context,
# batch 4 and 16, contexts 4096 and 32768, and the DeepSeek / fp8 shapes of issue 18. One JSON per
# run, packed into $OUT/decode.tar.gz, the summaries in $OUT/decode.log.
# Usage: BIN=.device/build/braidinfer OUT=... bash tools/device/decode.sh [--quick]
#   RUNS="shape batch context;..."  replaces the matrix (e.g. RUNS="llama-3.2-1b 1 256")
#   PDL_AB=1                         runs each case twice in a row: BRAID_PDL=0 (every kernel
#                                    launched the ordinary way), then as shipped
#   AB_ENV="VAR=VALUE"               the same with another switch (e.g. BRAID_DECODE_ONE_CHUNK_KEYS=512);
#                                    those files are named ..._$AB_LABEL (default alt; PDL_AB's:
#                                    ..._nopdl)
#   BINS="NAME=PATH ..."             runs each case with each of these binaries in turn, one
#                                    after another (A/B of two builds in one call); files are
#                                    named SHAPE_bB_cC_NAME
set -uo pipefail
BIN=${BIN:-build/braidinfer}
OUT=${OUT:-./device-out}
mkdir -p "$OUT/decode"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
default_runs="qwen2.5-0.5b 1 256;llama-3.2-1b 1 256;llama-3.1-8b 1 256;qwen3-30b-a3b 1 256"
default_runs+=";llama-3.2-1b 4 256;llama-3.2-1b 16 256;llama-3.1-8b 4 256;llama-3.1-8b 16 256"
default_runs+=";llama-3.2-1b 1 4096;llama-3.2-1b 1 32768;llama-3.1-8b 1 4096;llama-3.1-8b 1 32768"
default_runs+=";deepseek-ocr-lm 1 256;deepseek-v2-lite 1 256;moonlight-16b-a3b 1 256;deepseek-ocr-lm 4 256"
default_runs+=";llama-3.1-8b-fp8 1 256;llama-3.1-8b-fp8-dynamic 1 256;qwen3-30b-a3b-fp8 1 256"
IFS=';' read -r -a runs <<<"${RUNS:-$default_runs}"
variants=("")
ab_env=${AB_ENV:-}
ab_label=${AB_LABEL:-alt}
[[ "${PDL_AB:-0}" == 1 ]] && ab_env=BRAID_PDL=0 && ab_label=nopdl
[[ -n "$ab_env" ]] && variants=("$ab_env" "")
read -r -a bins <<<"${BINS:-=$BIN}"
rc=0
(
status=0
for r in "${runs[@]}"; do
  read -r shape batch context <<<"$r"
  for bin in "${bins[@]}"; do
  for setting in "${variants[@]}"; do  # an assignment to export, or "" for as shipped
    label=${bin%%=*}
    name="${shape}_b${batch}_c${context}${label:+_$label}${setting:+_$ab_label}"
    echo "=== $name"
    if [[ -n "$setting" ]]; then export "${setting?}"; elif [[ -n "$ab_env" ]]; then unset "${ab_env%%=*}"; fi
    "${bin#*=}" bench decode --shape "$shape" --batch "$batch" --context "$context" "$@" \
      --json "$OUT/decode/$name.json" > "$OUT/decode/$name.log" 2>&1 || status=1
    grep -E "graph.*ms/step|error" "$OUT/decode/$name.log"
  done
  done
done
exit $status
) 2>&1 | tee "$OUT/decode.log" || rc=1
tar czf "$OUT/decode.tar.gz" -C "$OUT" decode && rm -rf "$OUT/decode"
exit $rc
