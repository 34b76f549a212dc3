#!/usr/bin/env bash
# Installs what the build needs, configures, builds and runs every test.
#   scripts/test.sh                 # build in ./build, run CTest
#   scripts/test.sh --sanitize      # AddressSanitizer + UBSan build in ./build-sanitize
#                                   # (no CUDA, no benchmarks), run CTest
# Environment: STRATA_BUILD_DIR (default ./build or ./build-sanitize),
# STRATA_CMAKE_ARGS (extra configure arguments, e.g. -DSTRATA_CUDA=OFF),
# STRATA_JOBS (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=0
for arg in "$@"; do
  case $arg in
    --sanitize) sanitize=1 ;;
    *) echo "usage: scripts/test.sh [--sanitize]" >&2; exit 2 ;;
  esac
done
jobs=${STRATA_JOBS:-$(nproc)}
if [ "$sanitize" = 1 ]; then
  build=${STRATA_BUILD_DIR:-$root/build-sanitize}
  STRATA_CMAKE_ARGS="-DSTRATA_SANITIZE=ON -DSTRATA_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF ${STRATA_CMAKE_ARGS:-}"
  # Leaks are reported too; a report fails the test that made it.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  build=${STRATA_BUILD_DIR:-$root/build}
fi

"$root/scripts/setup.sh"

configure=(-S "$root" -B "$build")
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi
# shellcheck disable=SC2086
cmake "${configure[@]}" ${STRATA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
