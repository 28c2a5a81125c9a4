#!/usr/bin/env bash
# Copies what tools/device/check.sh needs from a local build into .device/build (gitignored) and
# packs it into .device/build.tar.xz, small enough to travel with the working tree to the GPU
# machine (64 MiB in all, the tracked files included): pass `carry: [".device/build.tar.xz"]`,
# then on the machine
#   tar xJf .device/build.tar.xz -C .device && BUILD_DIR=.device/build tools/device/check.sh
# The server and `bench serve` link Debian's libcpp-httplib.so, which the GPU machine lacks: it and
# the libraries it needs beyond glibc's go into lib/ (check.sh puts that folder on LD_LIBRARY_PATH).
# COMMIT holds the commit packed (with +dirty for uncommitted changes), which the binaries record.
#
# A/B builds travel in the same archive: VARIANTS="NAME=DIR ..." copies DIR's braidinfer (and
# tests/braid_tests, where DIR has one) into .device/build/variants/NAME/, laid out as the main
# build (tools/device/build-variant.sh makes such a DIR from a branch). The archive's
# dictionary spans all of them, so each variant costs only what differs from the main build:
# five builds of braidinfer and braid_tests packed into 13 MB (2026-12-06), where one build
# alone took 17.5 MB at xz's default.
# NO_PYTHON_LIB=1 leaves libbraid.so (the Python tests' library) out; EXTRA="FILE ..." adds
# probe programs (tools/device/chain_probe.cpp's build) beside braidinfer.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC=${1:-$ROOT/build}
DST=$ROOT/.device/build
rm -rf "$DST"
mkdir -p "$DST/tests" "$DST/lib"
cp "$SRC/braidinfer" "$SRC/libbraid.so" "$DST/"
cp "$SRC/tests/braid_tests" "$DST/tests/"
ldd "$SRC/braidinfer" | awk '/=> \// { print $3 }' |
  grep -E 'libcpp-httplib|libbrotli|libssl|libcrypto' | while read -r lib; do
    cp -L "$lib" "$DST/lib/"
  done
strip --strip-unneeded "$DST/braidinfer" "$DST/libbraid.so" "$DST/tests/braid_tests"
# The commit the bench JSON records (src/bench/harness/report.cpp, git_commit): the GPU machine's
# copy of the repository may carry an older .git, so the build says where it came from.
commit=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]] && commit+="+dirty"
echo "$commit" > "$DST/COMMIT"
[[ "${NO_PYTHON_LIB:-0}" == 1 ]] && rm -f "$DST/libbraid.so"
for f in ${EXTRA:-}; do  # probes built beside the library (e.g. build/chain_probe), into $DST
  cp "$f" "$DST/" && strip --strip-unneeded "$DST/$(basename "$f")"
done
for v in ${VARIANTS:-}; do
  name=${v%%=*} dir=${v#*=}
  mkdir -p "$DST/variants/$name/tests"
  cp "$dir/braidinfer" "$DST/variants/$name/"
  strip --strip-unneeded "$DST/variants/$name/braidinfer"
  if [[ -f "$dir/tests/braid_tests" ]]; then
    cp "$dir/tests/braid_tests" "$DST/variants/$name/tests/"
    strip --strip-unneeded "$DST/variants/$name/tests/braid_tests"
  fi
done
# One dictionary over the whole folder (xz -9's is 64 MiB, less than one build): unpacking needs
# about as much memory as the dictionary.
tar cf - -C "$ROOT/.device" build | xz --lzma2=preset=9,dict=512MiB -T1 > "$ROOT/.device/build.tar.xz"
du -sh "$DST" "$ROOT/.device/build.tar.xz"
