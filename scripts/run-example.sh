#!/usr/bin/env bash
# Sets up, builds the strata binary and simulates a bundled scenario (GPT-3
# 175B on 128 DGX A100 nodes, Megatron-style 3D parallelism): step time,
# memory per GPU, the step's trace and the model's description.
#   scripts/run-example.sh [SCENARIO]
# Outputs go to out/example/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STRATA_BUILD_DIR:-$root/build}
scenario=${1:-$root/configs/scenarios/gpt3-175b-megatron.json}
out=$root/out/example

"$root/scripts/setup.sh"
configure=(-S "$root" -B "$build")
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi
cmake "${configure[@]}" >/dev/null
cmake --build "$build" --target strata -j "$(nproc)"

strata=$build/app/strata
mkdir -p "$out"
# Write to temporary files and rename, so a failure leaves nothing half-written.
"$strata" describe "$scenario" --format json >"$out/describe.json.tmp"
"$strata" simulate "$scenario" --format json --trace "$out/trace.json" >"$out/simulate.json.tmp"
"$strata" simulate "$scenario" >"$out/simulate.txt.tmp"
for f in describe.json simulate.json simulate.txt; do mv "$out/$f.tmp" "$out/$f"; done

cat "$out/simulate.txt"
echo
echo "Outputs:"
echo "  $out/simulate.txt   (the report above: step time, MFU, time and memory breakdowns)"
echo "  $out/simulate.json  (the same, machine-readable)"
echo "  $out/trace.json     (the step's timeline: open in https://ui.perfetto.dev or chrome://tracing)"
echo "  $out/describe.json  (the model: parameters, FLOPs per token, per-layer ops)"
