#!/usr/bin/env bash
# Dally's main job on a fresh machine: installs what is missing, builds in
# Release and runs the real-time timer demo. Extra arguments go to the demo
# (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${DALLY_DEMO_BUILD_DIR:-build/release}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDALLY_BUILD_BENCH=OFF \
  >/dev/null
cmake --build "$build" -j2 --target dally-timer-demo
"$build/apps/dally-timer-demo" "$@"
