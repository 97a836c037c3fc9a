#!/usr/bin/env bash
# Builds tessera and runs the main job: the OpenAI-compatible server. Without arguments it serves
# the built-in demo model (a DeepSeek-V3-architecture checkpoint with RANDOM weights, generated on
# first use, with the real DeepSeek-V3 tokenizer and chat template) on 127.0.0.1:8000.
# Extra arguments go to `tessera serve`, e.g. `scripts/run.sh --model /models/Kimi-K2.5 --port 8080`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Preset "serve": the binary alone, without tests, benchmarks or the test-only hooks.
cmake --preset serve >/dev/null
cmake --build --preset serve -j "$(nproc)"
exec ./build/serve/tessera serve "$@"
