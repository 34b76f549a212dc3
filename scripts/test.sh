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

# The Python module (python/, docs/python.md) builds against a virtual
# environment in the build directory holding nanobind, scikit-build-core,
# pytest and pandas from PyPI; the configure takes its Python
# (STRATA_PYTHON=AUTO). Without one (no network), everything else still
# builds and the module's tests are not registered. Not for --sanitize.
python_args=()
if [ "$sanitize" = 0 ]; then
  venv=$build/.venv
  if ! "$venv/bin/python" -c "import nanobind, scikit_build_core, pytest, pandas" 2>/dev/null; then
    mkdir -p "$build"
    if ! { python3 -m venv "$venv" &&
           "$venv/bin/python" -m pip install -q --disable-pip-version-check \
             "nanobind>=2.0" "scikit-build-core>=0.10" pytest pandas; }; then
      echo "test.sh: warning: no Python environment for the module at $venv; building without it" >&2
      rm -rf "$venv"
    fi
  fi
  if [ -x "$venv/bin/python" ]; then python_args=(-DPython_EXECUTABLE="$venv/bin/python"); fi
fi

configure=(-S "$root" -B "$build")
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi
# shellcheck disable=SC2086
cmake "${configure[@]}" "${python_args[@]}" ${STRATA_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
