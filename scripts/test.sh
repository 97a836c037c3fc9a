#!/usr/bin/env bash
# Builds tessera and runs the whole test suite through ctest:
#   0. the format check (scripts/check_format.sh: every tracked C++/CUDA source is what clang-format
#      makes of it), first because it costs seconds;
#   1. the release build and its tests, warnings as errors: the CUDA backend is compiled for sm_80
#      and sm_90a when nvcc is found (GPU tests skip themselves without a GPU; on the GPU
#      machine TESSERA_REQUIRE_GPU=1 makes such a skip a failure), else the CPU-only build;
#   2. unless TESSERA_QUICK=1: the same tests under AddressSanitizer + UBSan (preset asan: clang, which
#      builds it 2.5x faster than gcc, so the project is also compiled by a second compiler with
#      warnings as errors), and the libFuzzer targets for a bounded time (scripts/fuzz.sh,
#      TESSERA_FUZZ_SECONDS each). CI has 90 minutes on 2 cores: keep the whole script well under.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
scripts/check_format.sh
# CUDA for sm_80 and sm_90a only: every architecture-specific path (sm_90a's wgmma / TMA) and the
# generic one that sm_100 and sm_120 also compile; the five default archs cost CI minutes it lacks.
cmake --preset release -DTESSERA_WERROR=ON "-DCMAKE_CUDA_ARCHITECTURES=80-real;90a-real" >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
if [ "${TESSERA_QUICK:-0}" != 1 ]; then
  echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake --preset asan -DTESSERA_WERROR=ON >/dev/null
  cmake --build --preset asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --preset asan -j "$jobs"
  echo "== fuzz targets"
  scripts/fuzz.sh
fi
