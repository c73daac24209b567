#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan + UBSan
# (warnings are errors) and runs every suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${DALLY_TEST_BUILD_DIR:-build/test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DDALLY_SANITIZE=ON \
  -DDALLY_WERROR=ON -DDALLY_BUILD_BENCH=ON
cmake --build "$build" -j2
cd "$build"
ctest --output-on-failure -j2 --timeout 600
