# Sourced by the device scripts: unpacks the kit (once per machine) and sets paths.
# Runs from the repository root on the device machine, with device_carry/ carried.
set -euo pipefail
KIT="${TESSERA_KIT:-/tmp/tessera-kit}"
# Binaries built on this machine by build.sh take precedence over a carried kit.
if [ ! -f "$KIT/built" ] && [ ! -x "$KIT/bin/tessera" ] && [ ! -f device_carry/kit.tar.xz ]; then
  echo "env.sh: no binaries: run device_carry/build.sh first (or carry a kit.tar.xz from make_kit.sh)" >&2
  return 1 2>/dev/null || exit 1
fi
if [ ! -f "$KIT/built" ] && { [ ! -x "$KIT/bin/tessera" ] || [ device_carry/kit.tar.xz -nt "$KIT/stamp" ]; }; then
  rm -rf "$KIT" && mkdir -p "$KIT"
  tar xJf device_carry/kit.tar.xz -C "$KIT"
  touch "$KIT/stamp"
fi
if [ ! -d /tmp/shared/fixtures ]; then
  mkdir -p /tmp/shared && tar xJf device_carry/fixtures.tar.xz -C /tmp/shared
fi
export LD_LIBRARY_PATH="$KIT/lib:${LD_LIBRARY_PATH:-}"
export PATH="$KIT/bin:$PATH"
export TESSERA_FIXTURES=/tmp/shared/fixtures
export TESSERA_REQUIRE_GPU=1
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
export TESSERA_BINARY="$KIT/bin/tessera"
