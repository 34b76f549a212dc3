#!/usr/bin/env bash
# Sets up, builds the strata binary and runs it on a bundled scenario
# (GPT-3 175B on 128 DGX A100 nodes, Megatron-style 3D parallelism).
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
"$strata" describe "$scenario" >"$out/describe.txt.tmp"
mv "$out/describe.json.tmp" "$out/describe.json"
mv "$out/describe.txt.tmp" "$out/describe.txt"

cat "$out/describe.txt"
echo
echo "Outputs:"
echo "  $out/describe.txt   (the table above)"
echo "  $out/describe.json  (machine-readable: params, flops_per_token, per-layer ops)"
