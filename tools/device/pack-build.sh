#!/usr/bin/env bash
# Copies what tools/device/check.sh needs from a local build into .device/build (gitignored), small
# enough to travel with the working tree to the GPU machine: pass `carry: [".device/build"]` and
# run check.sh with BUILD_DIR=.device/build.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC=${1:-$ROOT/build}
DST=$ROOT/.device/build
rm -rf "$DST"
mkdir -p "$DST/tests"
cp "$SRC/braidinfer" "$SRC/libbraid.so" "$DST/"
cp "$SRC/tests/braid_tests" "$DST/tests/"
du -sh "$DST"
