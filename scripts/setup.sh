#!/usr/bin/env bash
# Installs the Debian packages Strata's build needs. Idempotent: does nothing
# when every package is already present. Run as root (or with sudo available)
# on Debian 12.
set -euo pipefail

packages=(
  cmake g++ ninja-build ccache pkg-config
  libboost-graph-dev nlohmann-json3-dev libcli11-dev doctest-dev
  libbenchmark-dev libopenblas-dev python3
  python3-dev python3-venv  # the Python module (python/): headers, and scripts/test.sh's venv
  libopenmpi-dev openmpi-bin  # mpirun and MPI for multi-GPU CUDA runs (one process per GPU)
  chromium  # headless browser for the report test (tests/e2e/check_report.py)
  clang libclang-rt-dev  # libFuzzer and the sanitizer runtimes for scripts/fuzz.sh
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
