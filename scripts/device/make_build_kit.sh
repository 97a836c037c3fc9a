#!/usr/bin/env bash
# Packs the Debian build dependencies that the GPU machine's image lacks (pcre2, cpp-httplib with brotli,
# googletest with gmock, and nlohmann-json 3.11.2: the image's 3.11.3 compares strings with json differently) into the git-ignored device_carry/deps.tar.xz, with the device scripts and
# fixtures, so that scripts/device/build.sh can build tessera there on 16 cores (minutes) instead
# of here on 2 (most of an hour). The image has fmt, spdlog, CLI11 and benchmark.
# Usage: scripts/device/make_build_kit.sh [--baseline REV]   (then run `bash device_carry/build.sh` with
# carry ["device_carry"]). --baseline packs REV's sources (git archive) as device_carry/baseline.tar.xz
# for `run.sh ab`, which times the working tree against it on the same GPU.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kit="$root/device_carry"
mkdir -p "$kit"
if [ "${1:-}" = "--baseline" ]; then
  git -C "$root" archive --format=tar "${2:?--baseline needs a revision}" | xz -T0 > "$kit/baseline.tar.xz"
  git -C "$root" rev-parse "$2" > "$kit/baseline.rev"
  cp "$root"/scripts/device/*.sh "$root"/scripts/device/*.py "$kit/"
  du -sh "$kit/baseline.tar.xz"
  exit 0
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for p in libpcre2-dev libcpp-httplib-dev libbrotli-dev libgtest-dev libgmock-dev nlohmann-json3-dev; do
  dpkg -L "$p" | while read -r f; do
    [ -f "$f" ] || [ -L "$f" ] || continue
    case "$f" in /usr/share/*) continue ;; esac
    mkdir -p "$stage$(dirname "$f")"
    cp -P "$f" "$stage$f"
  done
done
# The runtime libraries those link (httplib's brotli may be missing on the image).
lib=/usr/lib/x86_64-linux-gnu
for so in libcpp-httplib.so.0.11* libpcre2-8.so.0* libpcre2-16.so.0* libpcre2-32.so.0* libpcre2-posix.so.3* \
  libbrotlidec.so.1* libbrotlienc.so.1* libbrotlicommon.so.1*; do
  for f in $lib/$so; do [ -e "$f" ] && cp -P "$f" "$stage$lib/"; done
done
tar cJf "$kit/deps.tar.xz" -C "$stage" usr
[ -f "$kit/fixtures.tar.xz" ] || tar cJf "$kit/fixtures.tar.xz" -C "$root/../shared" \
  --exclude=fixtures/tokenizers/o200k --exclude=fixtures/tokenizers/kimi-style-tiktoken fixtures
cp "$root"/scripts/device/*.sh "$root"/scripts/device/*.py "$kit/"
du -sh "$kit"/*
