#!/usr/bin/env bash
# Builds a branch's braidinfer and tests/braid_tests in the local build folder and keeps a copy in
# .device/variant-builds/NAME (gitignored), then checks the starting branch out again and rebuilds
# it, so that tools/device/pack-build.sh can carry both (VARIANTS="NAME=.device/variant-builds/NAME").
# ccache makes the switches cheap: only the files the branches differ in compile.
# Usage: tools/device/build-variant.sh BRANCH NAME [BUILD_DIR]   (a clean working tree)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
branch=${1:?usage: build-variant.sh BRANCH NAME [BUILD_DIR]}
name=${2:?usage: build-variant.sh BRANCH NAME [BUILD_DIR]}
build=${3:-$ROOT/build}
cd "$ROOT"
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  echo "build-variant.sh: the working tree has uncommitted changes; commit or stash them first" >&2
  exit 1
fi
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
dst=$ROOT/.device/variant-builds/$name
trap 'git checkout -q "$start"' EXIT
git checkout -q "$branch"
ninja -C "$build" braidinfer tests/braid_tests > /dev/null
rm -rf "$dst" && mkdir -p "$dst/tests"
cp "$build/braidinfer" "$dst/" && cp "$build/tests/braid_tests" "$dst/tests/"
git rev-parse --short=12 HEAD > "$dst/COMMIT"
git checkout -q "$start"
trap - EXIT
ninja -C "$build" braidinfer tests/braid_tests > /dev/null
echo "$name: $(cat "$dst/COMMIT") ($branch) in $dst; $start rebuilt"
