#!/usr/bin/env bash
# Packs what the GPU machine needs into the git-ignored device_carry/ (carried with `run`):
# the binaries of build/dev (configure it with -DCMAKE_CUDA_ARCHITECTURES=90a-real -DTESSERA_USE_ICU=OFF),
# the Debian shared libraries they link that a bare CUDA image lacks, and the shared fixtures.
# Usage: scripts/device/make_kit.sh [build dir]   (then run with carry ["device_carry"])
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build/dev}"
kit="$root/device_carry"
mkdir -p "$kit"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in tessera tests/cuda/cuda_tests tests/server/server_tests tests/cli/cli_tests tests/ops/backend_ops_tests; do
  [ -f "$build/$b" ] || { echo "make_kit: $build/$b is missing (build it first)" >&2; exit 1; }
  cp "$build/$b" "$stage/bin/"
  strip "$stage/bin/$(basename "$b")"
done
# Libraries outside glibc/libstdc++ and the driver: spdlog, fmt, pcre2, gtest... whatever ldd names.
for f in "$stage"/bin/*; do
  # CUDA's own libraries (cudart, cuBLASLt) are on the device machine: only Debian's travel.
  ldd "$f" | awk '/=> \//{print $3}' | grep -v '^/usr/local/cuda' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|libdl*|librt*|ld-linux*|libcuda.so*) ;;
      *) cp -n "$lib" "$stage/lib/" ;;
    esac
  done
done
tar cJf "$kit/kit.tar.xz" -C "$stage" bin lib
# The GPU suites read the model fixtures and the DeepSeek-V3 tokenizer; the other tokenizers stay
# out (the carried tree is limited to 64 MiB).
[ -f "$kit/fixtures.tar.xz" ] || tar cJf "$kit/fixtures.tar.xz" -C "$root/../shared" \
  --exclude=fixtures/tokenizers/o200k --exclude=fixtures/tokenizers/kimi-style-tiktoken fixtures
cp "$root"/scripts/device/*.sh "$kit/"
du -sh "$kit"/*
