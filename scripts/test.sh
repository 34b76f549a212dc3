#!/usr/bin/env bash
# Installs what the build needs, configures, builds and runs every test.
#   scripts/test.sh                 # build in ./build, run CTest
# Environment: STRATA_BUILD_DIR (default ./build), STRATA_CMAKE_ARGS (extra
# configure arguments, e.g. -DSTRATA_CUDA=OFF), STRATA_JOBS (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STRATA_BUILD_DIR:-$root/build}
jobs=${STRATA_JOBS:-$(nproc)}

"$root/scripts/setup.sh"

configure=(-S "$root" -B "$build")
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi
# shellcheck disable=SC2086
cmake "${configure[@]}" ${STRATA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
