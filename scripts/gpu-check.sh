#!/usr/bin/env bash
# The CUDA backend's check on a machine with a GPU, in one run of under five
# minutes:
#   1. builds strata, the GPU tests and bench_cuda with -DSTRATA_CUDA=ON for
#      sm_90 (Hopper: H100, H200) in ./build-gpu,
#   2. runs the GPU tests (CTest label gpu),
#   3. calibrates the GPU (strata calibrate --backend cuda --quick),
#   4. times every matrix product of a training step where it runs, and
#      each shape alone (bench_cuda --step_gemms),
#   5. validates the four bundled single-GPU scenarios (plain, full
#      recompute, activation offload, bf16: configs/scenarios/gpu-1x-*.json)
#      against that calibration,
#   6. with two GPUs or more and mpirun: validates data parallelism over
#      NCCL, one process per GPU (mpirun -n 2, configs/scenarios/
#      gpu-2x-dp.json); otherwise the report says it was skipped and why,
# and writes gpu-report.json and gpu-report.md (predicted against measured
# step time and peak memory, the targets met or not) into DIR, beside the
# raw outputs (gpu-check.log, calibration.json, step-gemms.json,
# validate-<scenario>.json): nine files (ten with two GPUs).
#
#   scripts/gpu-check.sh [DIR]      # DIR defaults to ./gpu-check-out
#
# Without a GPU it says so and exits 77 (nothing checked). A step that fails
# is recorded in the report and the later steps still run where they can;
# the exit status is 0 when every step ran and every test passed, else 1.
# Environment: STRATA_GPU_BUILD_DIR (default ./build-gpu), STRATA_GPU_BUILD_TYPE
# (default Release), STRATA_JOBS (default nproc), CUDA_ARCH (default 90).
#
# A machine without the build's Debian packages (Boost, nlohmann/json,
# CLI11, doctest, Google Benchmark, OpenBLAS) and without network access can
# take them as .deb files in ./.gpu-deps (scripts/gpu-deps.sh downloads them
# on a Debian 12 machine): they are unpacked into the build folder, not
# installed. NCCL is taken from the CUDA toolkit, else from Python's
# nvidia-nccl wheel when one is installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$PWD/gpu-check-out}" && cd "${1:-$PWD/gpu-check-out}" && pwd)
build=${STRATA_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${STRATA_JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
work=$build/gpu-check-work
log=$out/gpu-check.log
t_start=$(date +%s)

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ "$gpus" -eq 0 ]; then
  echo "gpu-check: no GPU found (nvidia-smi lists none): nothing checked" >&2
  exit 77
fi

mkdir -p "$work"
rm -f "$out"/gpu-report.json "$out"/gpu-report.md "$out"/calibration.json "$out"/step-gemms.json \
  "$out"/validate-*.json "$work"/*
: >"$log"
say() { echo "gpu-check: $*" | tee -a "$log" >&2; }
# phase NAME STATUS SECONDS [NOTE]: one line per step for the report.
phase() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$work/phases.tsv"; }
# run_step NAME TIMEOUT_S COMMAND...: runs with a time limit, output to the log.
run_step() {
  local name=$1 limit=$2
  shift 2
  local a b rc
  a=$(date +%s)
  say "$name: $*"
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  b=$(date +%s)
  if [ $rc -eq 0 ]; then
    phase "$name" ok $((b - a))
  elif [ $rc -eq 124 ]; then
    phase "$name" timeout $((b - a)) "stopped after ${limit} s"
  else
    phase "$name" failed $((b - a)) "exit $rc"
  fi
  say "$name: exit $rc after $((b - a)) s"
  return $rc
}

{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  command -v nvcc >/dev/null && nvcc --version | tail -2
  echo "cores: $(nproc); $(uname -srm)"
} >>"$log" 2>&1

# ---- 1. build -----------------------------------------------------------------
cmake_args=(-S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${STRATA_GPU_BUILD_TYPE:-Release}" -DSTRATA_CUDA=ON
            -DCMAKE_CUDA_ARCHITECTURES="$arch" -DSTRATA_BUILD_BENCH=ON -DSTRATA_BUILD_TESTS=ON)
command -v ninja >/dev/null && [ ! -f "$build/CMakeCache.txt" ] && cmake_args+=(-G Ninja)
if compgen -G "$root/.gpu-deps/*.deb" >/dev/null; then
  deps=$build/deps
  if [ ! -d "$deps/usr" ]; then
    mkdir -p "$deps"
    for f in "$root"/.gpu-deps/*.deb; do dpkg -x "$f" "$deps"; done
  fi
  multiarch=x86_64-linux-gnu
  cmake_args+=(-DCMAKE_PREFIX_PATH="$deps/usr"
               -DCMAKE_LIBRARY_PATH="$deps/usr/lib/$multiarch/openblas-pthread;$deps/usr/lib/$multiarch"
               -DCBLAS_INCLUDE_DIR="$deps/usr/include/$multiarch/openblas-pthread")
  export LD_LIBRARY_PATH="$deps/usr/lib/$multiarch/openblas-pthread:$deps/usr/lib/$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "using the packages unpacked from .gpu-deps in $deps"
fi
cuda_home=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
if [ ! -f "$cuda_home/include/nccl.h" ]; then
  nccl=$(python3 -c 'import nvidia.nccl as m, os; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
    lib=$(ls "$nccl"/lib/libnccl.so* 2>/dev/null | head -1)
    cmake_args+=(-DNCCL_INCLUDE_DIR="$nccl/include" -DNCCL_LIBRARY="$lib")
    export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "NCCL from Python's wheel: $nccl"
  fi
fi
built=1
run_step configure 120 cmake "${cmake_args[@]}" || built=0
if [ $built = 1 ]; then
  targets=(strata strata_cuda_tests strata_cuda_device_test bench_cuda)
  # The mpirun tests (mpi.nccl is a GPU test) exist when MPI was found.
  grep -qs 'mpi.nccl' "$build/backend/CTestTestfile.cmake" && targets+=(strata_cuda_multi_test)
  run_step build 300 cmake --build "$build" -j "$jobs" --target "${targets[@]}" || built=0
fi
strata=$build/app/strata

# ---- 2. GPU tests -----------------------------------------------------------------
if [ $built = 1 ]; then
  run_step tests 180 ctest --test-dir "$build" -L gpu --output-on-failure
  # The per-test lines, for the report.
  grep -E 'Test +#[0-9]+: ' "$log" | tail -n 20 >"$work/tests.txt" || true
fi

# ---- 3. calibration, 4. the step's GEMMs, 5. validation ---------------------------
scenarios=(plain full-recompute offload bf16)
if [ $built = 1 ]; then
  if run_step calibrate 200 "$strata" calibrate --backend cuda --quick --out "$out/calibration.json"; then
    cal=(--calibration "$out/calibration.json")
  else
    cal=()
  fi
  # Every matrix product of the plain scenario's step timed where it runs,
  # and each shape alone.
  a=$(date +%s)
  say "step-gemms"
  if timeout 150 "$build/backend/bench_cuda" --step_gemms="$root/configs/scenarios/gpu-1x-plain.json" \
      >"$work/step-gemms.json" 2>>"$log"; then
    cp "$work/step-gemms.json" "$out/step-gemms.json"
    phase step-gemms ok $(($(date +%s) - a))
  else
    phase step-gemms failed $(($(date +%s) - a))
  fi
  for s in "${scenarios[@]}"; do
    a=$(date +%s)
    say "validate $s"
    timeout 150 "$strata" validate "$root/configs/scenarios/gpu-1x-$s.json" --backend cuda "${cal[@]}" \
      --steps 3 --format json >"$work/validate-$s.json" 2>>"$log"
    rc=$?
    b=$(date +%s)
    if [ $rc -eq 0 ]; then
      cp "$work/validate-$s.json" "$out/validate-$s.json"
      phase "validate $s" ok $((b - a))
    else
      phase "validate $s" "$([ $rc -eq 124 ] && echo timeout || echo failed)" $((b - a)) "exit $rc"
    fi
    say "validate $s: exit $rc after $((b - a)) s"
  done
fi

# ---- 6. two GPUs: data parallelism over NCCL, one process per GPU ----------------
if [ $built = 1 ]; then
  skip=""
  mpirun=$(command -v mpirun || true)
  if [ "$gpus" -lt 2 ]; then
    skip="$gpus GPU visible; data parallelism over NCCL needs 2"
  elif [ -z "$mpirun" ]; then
    skip="no mpirun (Debian: openmpi-bin, libopenmpi-dev; then rebuild)"
  elif ! grep -qs 'mpi.nccl' "$build/backend/CTestTestfile.cmake"; then
    skip="strata was built without MPI (libopenmpi-dev)"
  fi
  if [ -n "$skip" ]; then
    say "validate 2x-dp: skipped: $skip"
    phase "validate 2x-dp" skipped 0 "$skip"
  else
    scenarios+=(2x-dp)
    as_root=()
    [ "$(id -u)" -eq 0 ] && as_root=(--allow-run-as-root)
    a=$(date +%s)
    say "validate 2x-dp: mpirun -n 2"
    timeout 200 "$mpirun" -n 2 "${as_root[@]}" "$strata" validate "$root/configs/scenarios/gpu-2x-dp.json" \
      --backend cuda "${cal[@]}" --steps 3 --format json >"$work/validate-2x-dp.json" 2>>"$log"
    rc=$?
    b=$(date +%s)
    if [ $rc -eq 0 ]; then
      cp "$work/validate-2x-dp.json" "$out/validate-2x-dp.json"
      phase "validate 2x-dp" ok $((b - a))
    else
      phase "validate 2x-dp" "$([ $rc -eq 124 ] && echo timeout || echo failed)" $((b - a)) "exit $rc"
    fi
    say "validate 2x-dp: exit $rc after $((b - a)) s"
  fi
fi

# ---- the report ------------------------------------------------------------------
phase total done $(($(date +%s) - t_start))
python3 "$root/scripts/gpu_report.py" "$out" "$work" "${scenarios[@]}" >>"$log" 2>&1
rc=$?
say "report: $out/gpu-report.md (exit $rc), $(($(date +%s) - t_start)) s in all"
# 0 only when the report was written and every step ran to its end (or was
# skipped for want of a second GPU or of MPI).
[ $rc -eq 0 ] && awk -F'\t' '$2 != "ok" && $2 != "done" && $2 != "skipped" { bad = 1 } END { exit bad }' "$work/phases.tsv"
exit $?
