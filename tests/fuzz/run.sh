#!/usr/bin/env bash
# Runs the fuzz targets built in BUILD for SECONDS each (tests/fuzz/run.sh BUILD SECONDS
# [TARGET...]; all by default), FUZZ_JOBS at a time (default: the number of cores; libFuzzer's
# own loop is single-threaded), then prints one row per target: executions, executions per
# second, corpus size, and OK or what libFuzzer found. Exit status 1 if any target found a crash,
# leak or hang; its input is kept as BUILD/fuzz-artifacts/TARGET-{crash,leak,timeout}-<sha1> and
# its log as BUILD/fuzz-logs/TARGET.log. Reproduce with: BUILD/tests/fuzz/fuzz_TARGET INPUT.
#
# Each run starts from the committed seeds (tests/fuzz/corpus/TARGET/, read only) plus what
# earlier local runs added in BUILD/fuzz-corpus/TARGET/ (where libFuzzer writes new inputs), so
# the committed corpus never changes by itself.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:?usage: run.sh BUILD SECONDS [TARGET...]}"
seconds="${2:?usage: run.sh BUILD SECONDS [TARGET...]}"
shift 2
jobs="${FUZZ_JOBS:-$(nproc)}"
targets=("$@")
if ((${#targets[@]} == 0)); then
  for exe in "$build"/tests/fuzz/fuzz_*; do [ -x "$exe" ] && targets+=("$(basename "$exe")"); done
fi
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"

# One target; its exit status goes to BUILD/fuzz-logs/NAME.status.
fuzz_one() {
  local name="${1#fuzz_}"
  local work="$build/fuzz-corpus/$name" log="$build/fuzz-logs/$name.log"
  mkdir -p "$work"
  # The words the parser looks for (tests/fuzz/make_corpus.py writes them from its source).
  local dict=()
  [ -s "$root/tests/fuzz/dict/$name.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$name.dict")
  # -timeout: one input running 10 s is a hang. -rss_limit_mb: a loader that allocates for sizes
  # the input only claims fails here. -max_len: room for the seeds (real headers, configs,
  # templates), small enough to keep mutations fast.
  "$build/tests/fuzz/$1" "$work" "$root/tests/fuzz/corpus/$name" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 "${dict[@]}" \
      -artifact_prefix="$build/fuzz-artifacts/$name-" >"$log" 2>&1
  echo $? >"$build/fuzz-logs/$name.status"
}

for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  fuzz_one "$t" &
done
wait

failed=0
printf '%-18s %5s %12s %10s %7s  %s\n' target time executions rate corpus result
for t in "${targets[@]}"; do
  name="${t#fuzz_}"
  log="$build/fuzz-logs/$name.log"
  status=$(cat "$build/fuzz-logs/$name.status" 2>/dev/null || echo "?")
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(find "$build/fuzz-corpus/$name" -type f | wc -l)
  result="OK"
  if [ "$status" != 0 ]; then
    failed=1
    result="FAILED (exit $status): $(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [^ ]*\|ERROR: libFuzzer: [a-z-]*\|runtime error: .*\|braid fuzz: .*' "$log" || echo 'see the log'); $log"
    tail -n 40 "$log" >&2
  fi
  printf '%-18s %4ss %12s %8s/s %7s  %s\n' "$name" "$seconds" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
exit $failed
