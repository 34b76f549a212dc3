#!/usr/bin/env bash
# Downloads the Debian 12 packages Strata's build needs that a GPU machine
# without package access may lack (Boost headers, nlohmann/json, CLI11,
# doctest, Google Benchmark, OpenBLAS), about 21 MB of .deb files, into DIR
# (default ./.gpu-deps, which git ignores). Copy DIR along with the tree:
# scripts/gpu-check.sh unpacks .gpu-deps into its build folder (dpkg -x, no
# installation) when the machine's own packages are missing. OpenMPI is not
# among them: unpacked rather than installed, mpirun cannot find its own
# helpers and plugins (it needs its install prefix) and it pulls in a dozen
# libraries; a machine with two GPUs or more needs openmpi-bin and
# libopenmpi-dev installed for gpu-check.sh's multi-GPU step, which is
# skipped (and says so) without them.
#   scripts/gpu-deps.sh [DIR]        # on a Debian 12 machine with network access
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-deps}
mkdir -p "$dir"
cd "$dir"
apt-get download libboost1.74-dev nlohmann-json3-dev libcli11-dev doctest-dev \
  libbenchmark-dev libbenchmark1debian \
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread
du -sh "$dir"
