#!/usr/bin/env bash
# Builds tessera and runs the whole test suite through ctest:
#   1. the CPU build (release) and its tests;
#   2. unless TESSERA_QUICK=1: the same tests under AddressSanitizer + UBSan (preset asan), and the
#      libFuzzer targets for a bounded time (scripts/fuzz.sh, TESSERA_FUZZ_SECONDS each).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"
if [ "${TESSERA_QUICK:-0}" != 1 ]; then
  echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan -j "$jobs"
  echo "== fuzz targets"
  scripts/fuzz.sh
fi
