#!/usr/bin/env bash
# Fails, listing the files, when a tracked C++/CUDA source is not what clang-format makes of it
# (.clang-format in the repository root; Debian 12's clang-format 14, installed by setup.sh).
# Fix with: git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format check: ${#bad[@]} of ${#files[@]} files differ from clang-format's output:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format check: ${#files[@]} files formatted"
