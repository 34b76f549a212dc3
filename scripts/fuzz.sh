#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan) in ./build-fuzz and
# runs each for SECONDS (per target; default 10, so the seven targets take
# 70 s: the CI smoke run). Fails on any crash, sanitizer report, leak,
# input slower than 10 s or over 2 GiB of memory; the input that did it is
# left in build-fuzz/artifacts/.
#   scripts/fuzz.sh                      # every target, 10 s each
#   scripts/fuzz.sh 600 scenario         # one target for 10 minutes
#   scripts/fuzz.sh 600 hf_config calibration
# Targets: scenario hf_config calibration results explore_dir data import. New inputs that reach new
# code go to build-fuzz/corpus/<target> (kept between runs); the seeds in
# fuzz/corpus/<target> and the bundled configs are read, never written.
# Replay one input: build-fuzz/fuzz/fuzz_<target> FILE
# Environment: STRATA_FUZZ_BUILD_DIR (default ./build-fuzz), STRATA_JOBS
# (build jobs, default nproc), STRATA_FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=10
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
all=(scenario hf_config calibration results explore_dir data import)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "usage: scripts/fuzz.sh [SECONDS] [${all[*]}]..." >&2; exit 2; }
done
build=${STRATA_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${STRATA_JOBS:-$(nproc)}

"$root/scripts/setup.sh"
if [ ! -f "$build/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DSTRATA_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

# Seeds besides fuzz/corpus/<target>: the bundled files of that kind.
declare -A extra=(
  [scenario]="$root/configs/scenarios"
  [calibration]="$root/configs/calibration"
)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
mkdir -p "$build/artifacts"
summary=()
for t in "${targets[@]}"; do
  work="$build/corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-$t.log"
  echo "fuzz: $t for ${seconds} s (log $log)"
  # shellcheck disable=SC2086
  if ! "$build/fuzz/fuzz_$t" "$work" "$root/fuzz/corpus/$t" ${extra[$t]:-} \
      -dict="$root/fuzz/strata.dict" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
      -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t-" ${STRATA_FUZZ_ARGS:-} >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FAILED; the input is in $build/artifacts/ (replay: $build/fuzz/fuzz_$t FILE)" >&2
    exit 1
  fi
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: ...").
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | tr '\t' ' ' || true)
  summary+=("$t: ${done_line:-?}")
done
printf 'fuzz: %s\n' "${summary[@]}"
