#!/usr/bin/env bash
# Copies what tools/device/check.sh needs from a local build into .device/build (gitignored) and
# packs it into .device/build.tar.xz, small enough to travel with the working tree to the GPU
# machine (64 MiB in all): pass `carry: [".device/build.tar.xz"]`, then on the machine
#   tar xJf .device/build.tar.xz -C .device && BUILD_DIR=.device/build tools/device/check.sh
# The server and `bench serve` link Debian's libcpp-httplib.so, which the GPU machine lacks: it and
# the libraries it needs beyond glibc's go into lib/ (check.sh puts that folder on LD_LIBRARY_PATH).
# COMMIT holds the commit packed (with +dirty for uncommitted changes), which the binaries record.
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
tar cJf "$ROOT/.device/build.tar.xz" -C "$ROOT/.device" build
du -sh "$DST" "$ROOT/.device/build.tar.xz"
