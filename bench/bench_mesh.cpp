// Speed of the rank mesh at 131,072 GPUs (tp 8, cp 2, dp 128, pp 64, ep 8 on
// 8-GPU nodes, and an unaligned tp 3 layout on 4-GPU nodes): symmetry classes
// in one O(world) pass (target: well under 10 ms), distinct placements of
// every group dimension, and one rank's group and placement. And the rings
// a group's GPUs carry on a DGX-1's NVLink mesh (cost::intra_ring_GBps),
// which ModelStepCosts asks once per group and plan: all eight GPUs (the
// most rings to enumerate), and every subset of two or more in turn.
#include <benchmark/benchmark.h>

#include <array>
#include <vector>

#include "costmodel/model_io.hpp"
#include "costmodel/time_model.hpp"
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

// The DGX-1's hybrid cube-mesh, as its preset holds it.
strata::cost::NodeSpec dgx1() { return strata::cost::cluster_preset("dgx1-v100").node; }

void BM_IntraRingAllEight(benchmark::State& state) {
  const auto n = dgx1();
  const std::array<std::int64_t, 8> all{0, 1, 2, 3, 4, 5, 6, 7};
  for (auto _ : state) benchmark::DoNotOptimize(strata::cost::intra_ring_GBps(n, all));
}
BENCHMARK(BM_IntraRingAllEight)->Unit(benchmark::kMicrosecond);

void BM_IntraRingSubsets(benchmark::State& state) {
  const auto n = dgx1();
  std::vector<std::vector<std::int64_t>> groups;
  for (int mask = 1; mask < 256; ++mask) {
    std::vector<std::int64_t> g;
    for (int i = 0; i < 8; ++i)
      if ((mask >> i) & 1) g.push_back(i);
    if (g.size() >= 2) groups.push_back(std::move(g));
  }
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(strata::cost::intra_ring_GBps(n, groups[i]));
    i = (i + 1) % groups.size();
  }
  state.counters["groups"] = static_cast<double>(groups.size());
}
BENCHMARK(BM_IntraRingSubsets)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
