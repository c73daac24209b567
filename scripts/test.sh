#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with ASan + UBSan
# (warnings are errors) and runs every suite through CTest; then builds the
# heap test once more on jemalloc, as dallyd runs (a sanitizer build cannot
# link jemalloc), and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${DALLY_TEST_BUILD_DIR:-build/test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DDALLY_SANITIZE=ON \
  -DDALLY_WERROR=ON -DDALLY_BUILD_BENCH=ON
cmake --build "$build" -j2
(cd "$build" && ctest --output-on-failure -j2 --timeout 600)
heap_build=${build}-jemalloc
cmake -S . -B "$heap_build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDALLY_WERROR=ON -DDALLY_BUILD_BENCH=OFF
cmake --build "$heap_build" -j2 --target test_heap_jemalloc
cd "$heap_build"
ctest --output-on-failure --timeout 60 --no-tests=error -R '^heap_jemalloc$'
