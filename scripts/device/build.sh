#!/usr/bin/env bash
# Builds tessera on the GPU machine (from the carried working tree, with the Debian dependencies of
# device_carry/deps.tar.xz; scripts/device/make_build_kit.sh packs them) and installs the binaries
# where env.sh's kit lives, so run.sh and the other device scripts use them. The build directory
# stays on the machine while it is warm: a second call rebuilds only what changed.
# Usage (on the device, from the repository root): bash device_carry/build.sh [ninja targets...]
# TESSERA_SRC, TESSERA_BUILD_DIR and TESSERA_KIT build another source tree into another kit (run.sh
# ab builds the baseline of device_carry/baseline.tar.xz that way).
set -euo pipefail
DEPS=/tmp/tessera-deps
SRC="${TESSERA_SRC:-.}"
BUILD="${TESSERA_BUILD_DIR:-/tmp/tessera-build}"
KIT="${TESSERA_KIT:-/tmp/tessera-kit}"
if [ ! -d "$DEPS/usr" ] || [ device_carry/deps.tar.xz -nt "$DEPS/stamp" ]; then
  rm -rf "$DEPS" "$BUILD" && mkdir -p "$DEPS"  # new dependencies: configure afresh
  tar xJf device_carry/deps.tar.xz -C "$DEPS"
  # pkg-config files name prefix=/usr: point them at the unpacked copy.
  sed -i "s#^prefix=.*#prefix=$DEPS/usr#" "$DEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
  touch "$DEPS/stamp"
fi
export PKG_CONFIG_PATH="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig"
export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
start=$(date +%s)
# The carried headers go before the image's own (its nlohmann-json 3.11.3 has another ABI namespace:
# a source that picked it up would not link with one that used 3.11.2).
# NCCL: the toolkit's copy if it has one, else the nvidia-nccl Python wheel's (torch brings it).
NCCL_ROOT=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    -DTESSERA_USE_ICU=OFF -DCMAKE_CUDA_FLAGS=-lineinfo -DCMAKE_PREFIX_PATH="$DEPS/usr" ${NCCL_ROOT:+-DTESSERA_NCCL_ROOT="$NCCL_ROOT"} \
    -DCMAKE_CXX_FLAGS="-isystem $DEPS/usr/include" > "$BUILD.configure.log" 2>&1 ||
    { tail -40 "$BUILD.configure.log"; exit 1; }
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tessera cuda_tests server_tests cli_tests backend_ops_tests)
ninja -k 0 -C "$BUILD" "${targets[@]}" > "$BUILD.log" 2>&1 || { grep -m12 -A3 "error:\|^FAILED" "$BUILD.log"; exit 1; }
echo "build: ${targets[*]} in $(( $(date +%s) - start )) s"
mkdir -p "$KIT/bin" "$KIT/lib"
for b in tessera tests/cuda/cuda_tests tests/server/server_tests tests/cli/cli_tests tests/ops/backend_ops_tests; do
  [ -f "$BUILD/$b" ] && cp "$BUILD/$b" "$KIT/bin/"
done
cp -P "$DEPS"/usr/lib/x86_64-linux-gnu/*.so* "$KIT/lib/" 2>/dev/null || true
touch "$KIT/built"
