// Speed of the rematerialization solvers (docs/performance.md): the rotor
// dynamic programme on random heterogeneous chains of 200, 500 and 1,000
// stages with 100 memory levels (target: 200 stages in <= 1 s on one core),
// the frontier `strata tradeoff` computes for the ResNet-1001 preset, and the
// schedule checker.
#include <benchmark/benchmark.h>

#include <random>

#include "costmodel/model_io.hpp"
#include "strategies/remat.hpp"
#include "strategies/scenario.hpp"
#include "explorer/tradeoff.hpp"

namespace {

using namespace strata;
using namespace strata::strategies;

// Stages with forward 1–10 ms, backward 1–2× that, outputs 1–64 MiB,
// saved tensors 0–4× the output, working bytes up to half the output.
remat::Chain random_chain(int n) {
  std::mt19937_64 rng(42);
  auto u = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  remat::Chain c;
  c.input = 8 * kMiB;
  for (int i = 0; i < n; ++i) {
    const Time f = static_cast<Time>(u(1, 10) * 1e6);
    const auto x = static_cast<Bytes>(u(1, 64) * static_cast<double>(kMiB));
    c.stages.push_back({f, static_cast<Time>(static_cast<double>(f) * u(1, 2)), x,
                        static_cast<Bytes>(static_cast<double>(x) * u(0, 4)), 0,
                        static_cast<Bytes>(static_cast<double>(x) * u(0, 0.5))});
  }
  return c;
}

// One solve at half of store-all's peak.
void BM_Optimal(benchmark::State& state) {
  const remat::Chain c = random_chain(static_cast<int>(state.range(0)));
  const Bytes budget = remat::build(c, remat::store_all(c)).peak / 2;
  const int levels = static_cast<int>(state.range(1));
  Time t = 0;
  int tables = 0;
  for (auto _ : state) {
    const remat::Optimal r = remat::optimal(c, budget, levels);
    t = r.time;
    tables = r.tables;
    benchmark::DoNotOptimize(t);
  }
  state.counters["tables"] = tables;
  state.counters["overhead_pct"] =
      100.0 * (static_cast<double>(t) / static_cast<double>(c.compute()) - 1);
}
BENCHMARK(BM_Optimal)
    ->Args({200, 100})
    ->Args({500, 100})
    ->Args({1000, 100})
    ->Args({200, 400})
    ->Args({200, 1500})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

Scenario chen() {
  Scenario s;
  s.model = cost::model_preset("resnet1001");
  s.cluster = cost::cluster_preset("1xv100-32g");
  s.batch = {32, 32};
  s.plan.precision = Precision::FP32;
  s.plan.optimizer = Optimizer::Momentum;
  return s;
}

// Every table `strata tradeoff` solves for the 335-stage ResNet-1001.
void BM_FrontierResNet1001(benchmark::State& state) {
  const remat::Chain c = remat_chain(chen());
  std::size_t points = 0;
  for (auto _ : state) {
    const auto f = remat::optimal_frontier(c, static_cast<int>(state.range(0)));
    points = f.size();
    benchmark::DoNotOptimize(points);
  }
  state.counters["points"] = static_cast<double>(points);
}
BENCHMARK(BM_FrontierResNet1001)->Arg(100)->Arg(200)->Unit(benchmark::kMillisecond)->Iterations(1);

// The whole sweep: every policy at 16 budgets.
void BM_TradeoffResNet1001(benchmark::State& state) {
  const Scenario s = chen();
  for (auto _ : state) {
    const Tradeoff t = tradeoff(s);
    benchmark::DoNotOptimize(t.budgets.data());
  }
}
BENCHMARK(BM_TradeoffResNet1001)->Unit(benchmark::kMillisecond)->Iterations(1);

// Replaying a low-memory schedule of 1,000 stages (revolve, 8 snapshots).
void BM_Replay(benchmark::State& state) {
  const remat::Chain c = random_chain(1000);
  const remat::Schedule s = remat::build(c, remat::revolve(c, 8));
  for (auto _ : state) {
    const remat::Replay r = remat::replay(c, s.ops);
    benchmark::DoNotOptimize(r.peak);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(s.ops.size()));
}
BENCHMARK(BM_Replay)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
