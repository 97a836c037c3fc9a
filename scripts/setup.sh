#!/usr/bin/env bash
# Installs everything tessera needs to build and test, from Debian packages (and npm where a tool
# only lives there). Idempotent: safe to re-run; runs `apt-get update` at most once per call and only
# when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-dev            # libFuzzer and the sanitizers for the fuzz targets
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libicu-dev                       # NFC normalisation for tokenizer.json normalizers
  python3
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
