#!/usr/bin/env bash
# Builds tessera (CPU build) and runs the whole test suite through ctest.
# Stages: the release test suite; then, unless TESSERA_QUICK=1, the fuzz targets for a bounded time
# (scripts/fuzz.sh) when clang is present.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"
if [ "${TESSERA_QUICK:-0}" != 1 ] && [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh
fi
