#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time
# (TESSERA_FUZZ_SECONDS, default 10). Seeds come from fuzz/<area>/corpus/<target>/ when present;
# the run works on a temporary copy so the repository is never modified. Fails on any crash,
# hang (per-input timeout) or sanitizer report.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found, skipping fuzz targets"
  exit 0
fi
seconds="${TESSERA_FUZZ_SECONDS:-10}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target fuzzers
shopt -s nullglob
targets=(build/fuzz/fuzzers/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets yet"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  name=$(basename "$t")
  corpus="$work/$name"
  mkdir -p "$corpus"
  for seeds in fuzz/*/corpus/"$name"; do cp -r "$seeds"/. "$corpus"/ 2>/dev/null || true; done
  echo "fuzz: $name for ${seconds}s"
  "$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/$name-" "$corpus" > "$work/$name.log" 2>&1 || {
    echo "fuzz: $name FAILED"; tail -50 "$work/$name.log"; exit 1; }
  grep -E "stat::number_of_executed_units|Done" "$work/$name.log" | tail -2
done
echo "fuzz: all targets ran clean"
