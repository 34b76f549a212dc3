// Speed of the analytical memory model, the explorer's pruning step: plans
// varied over tp, pp, schedule, virtual stages, ZeRO, recompute, microbatch,
// optimizer and offload for Llama-3-70B on 512 H100s (target: >= 1,000,000
// plans per second on one core), and of the replayed timeline for comparison.
#include <benchmark/benchmark.h>

#include <vector>

#include "costmodel/model_io.hpp"
#include "lowering/memory.hpp"
#include "lowering/memory_lowering.hpp"
#include "strategies/validate.hpp"

namespace {

using namespace strata;
using namespace strata::strategies;

std::vector<Scenario> varied_plans() {
  Scenario base;
  base.model = cost::model_preset("llama3-70b");
  base.cluster = cost::cluster_preset("dgx-h100");
  base.cluster.nodes = 64;
  base.batch.global = 1024;
  std::vector<Scenario> out;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 8, 16})
      for (Schedule sched : {Schedule::OneFOneB, Schedule::Interleaved, Schedule::GPipe})
        for (int zero : {0, 1, 2, 3})
          for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full})
            for (int micro : {1, 2})
              for (Optimizer opt : {Optimizer::Adam, Optimizer::Adam8bit}) {
                Scenario s = base;
                s.plan.tp = tp;
                s.plan.pp = pp;
                s.plan.dp = 512 / (tp * pp);
                s.plan.schedule = sched;
                s.plan.virtual_stages = sched == Schedule::Interleaved ? 2 : 1;
                s.plan.zero = zero;
                s.plan.recompute = rc;
                s.plan.optimizer = opt;
                s.plan.sequence_parallel = tp > 1;
                s.batch.micro = micro;
                if (!first_violation(s)) out.push_back(s);
              }
  return out;
}

// Estimates the plans in turn, one per iteration.
void estimate_each(benchmark::State& state, const std::vector<Scenario>& plans) {
  std::size_t i = 0;
  for (auto _ : state) {
    auto est = estimate_memory(plans[i]);
    benchmark::DoNotOptimize(est.peak_bytes);
    if (++i == plans.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["plans"] = static_cast<double>(plans.size());
}

void BM_AnalyticalMemory(benchmark::State& state) {
  estimate_each(state, varied_plans());
}
BENCHMARK(BM_AnalyticalMemory);

// Optimal recompute within 40 GiB (the solver searching each stage's layer
// choices, timed by the cost model) on the same plans, by pipeline depth:
// pp = 1 searches 80 layers a stage, pp = 16 five.
void BM_OptimalRecompute(benchmark::State& state) {
  std::vector<Scenario> plans;
  for (auto s : varied_plans())
    if (s.plan.pp == state.range(0) && s.plan.schedule != Schedule::Interleaved) {
      s.plan.recompute = Recompute::Optimal;
      s.plan.memory_budget_GiB = 40;
      plans.push_back(s);
    }
  estimate_each(state, plans);
}
BENCHMARK(BM_OptimalRecompute)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_TimelineMemory(benchmark::State& state) {
  auto plans = varied_plans();
  plans.resize(64);  // a sample: each replays every stage's schedule
  std::size_t i = 0;
  for (auto _ : state) {
    auto est = simulate_memory(plans[i]);
    benchmark::DoNotOptimize(est.peak_bytes);
    if (++i == plans.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TimelineMemory)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
