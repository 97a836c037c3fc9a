#!/usr/bin/env bash
# Builds tessera and runs the main job. For now: greedy generation on a fixture checkpoint
# (random weights, so the ids are meaningless; the point is the whole load-and-forward path).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)"
model="${1:-../shared/fixtures/models/kimi-k25-tiny-nvfp4}"
./build/cpu/tessera generate --model "$model" --prompt-ids 1,2,3,4,5 --max-tokens 16
