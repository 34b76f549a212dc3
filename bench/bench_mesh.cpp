// Speed of the rank mesh at 131,072 GPUs (tp 8, cp 2, dp 128, pp 64, ep 8 on
// 8-GPU nodes, and an unaligned tp 3 layout on 4-GPU nodes): symmetry classes
// in one O(world) pass (target: well under 10 ms), distinct placements of
// every group dimension, and one rank's group and placement.
#include <benchmark/benchmark.h>

#include <array>

#include "strategies/rank_mesh.hpp"

namespace {

using namespace strata::strategies;

RankMesh aligned() {
  return RankMesh(8, 2, 128, 64, 8,
                  {ParallelDim::TP, ParallelDim::CP, ParallelDim::DP, ParallelDim::PP}, 8);
}
RankMesh unaligned() {  // 3 · 1 · 683 · 64 = 131,136 ranks; tp groups straddle nodes
  return RankMesh(3, 1, 683, 64, 1,
                  {ParallelDim::TP, ParallelDim::CP, ParallelDim::DP, ParallelDim::PP}, 4);
}

void BM_RankMesh(benchmark::State& state) {
  const RankMesh m = state.range(0) == 0 ? aligned() : unaligned();
  for (auto _ : state) benchmark::DoNotOptimize(m.representatives());
  state.counters["ranks"] = static_cast<double>(m.world());
  state.counters["classes"] = static_cast<double>(m.representatives().size());
}
BENCHMARK(BM_RankMesh)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_RankMeshPlacements(benchmark::State& state) {
  const RankMesh m = state.range(0) == 0 ? aligned() : unaligned();
  for (auto _ : state)
    for (MeshDim d : kAllMeshDims) benchmark::DoNotOptimize(m.placements(d));
}
BENCHMARK(BM_RankMeshPlacements)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_RankMeshGroupOf(benchmark::State& state) {
  const RankMesh m = aligned();
  std::int64_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.group_of(r, MeshDim::DP));
    benchmark::DoNotOptimize(m.placement(r, MeshDim::DataWithContext));
    r = (r + 7919) % m.world();
  }
}
BENCHMARK(BM_RankMeshGroupOf)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
