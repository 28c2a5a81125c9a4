# Sourced by the device-call scripts (decode_ab.sh, decode_report.sh, chain_ab.sh): the checkout
# as the working folder (ROOT), the carried build (B: BUILD_DIR, default .device/build), the
# output folder (OUT), the libraries the build needs, the source path the tests were built under,
# and the card's name and clocks first in the output.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
B=${BUILD_DIR:-.device/build}
OUT=${OUT:-./device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$ROOT/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests find their data under the source folder they were built in.
[ -e /work/main ] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
