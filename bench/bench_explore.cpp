// The explorer's scoring rate on its goal sweep (docs/explore.md): GPT-3
// 175B on 1024 A100-80GB, global batch 1536, "space": "auto". Every plan
// that passes the validity rules and the memory bound is collected once;
// the benchmarks score them in space order, cycling, one plan per item:
//   BM_ScoreCoarse   the explorer's scorer (coarse level, one core)
//   BM_ScoreLayer    the layer level, on every 97th plan (it is ~10⁴ times slower)
// items_per_second is plans per second per core.
//   BM_Replay/level/steady  predict_chunks (level 0) or predict_replayed (the
//                 layer program the explorer refines kept plans with, level 1)
//                 with the steady-state extrapolation off (0) or on (1), over
//                 every 61st feasible plan of the Llama-3-70B sweep
//                 (configs/scenarios/llama3-70b-explore.json); compare the
//                 pairs' times in one run.
//
// With --agreement (before the benchmark flags) it instead re-scores every
// `stride`-th feasible plan at both levels and prints the relative step-time
// error of the chunk level and how many plans differ in peak memory, for the
// plans whose chunk passes are merged and for those replayed layer by layer
// (ZeRO-3, offload), as docs/performance.md reports it:
//   bench_explore --agreement [stride]
// With --profile it times the explorer's scoring (predict_chunks, one core)
// of every `stride`-th feasible plan alone and prints the share of the time
// per schedule, pp, virtual stages, ZeRO-3 and what the steady-state
// extrapolation did ("steady", or why not), most first:
//   bench_explore --profile [stride]
// With --phases it splits the scoring of every `stride`-th feasible plan
// (the whole chunk program, no extrapolation; the least of three runs) into
// building the program, replaying it and the prediction, per task:
//   bench_explore --phases [stride]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "report/explore.hpp"
#include "lowering/coarse.hpp"
#include "explorer/explore.hpp"
#include "lowering/memory.hpp"
#include "strategies/space.hpp"
#include "lowering/steady_state.hpp"
#include "lowering/step_costs.hpp"
#include "strategies/validate.hpp"

namespace {

using namespace strata::strategies;

struct Sweep {
  Scenario base;
  std::vector<Scenario> feasible;
};

const Sweep& sweep() {
  static const Sweep s = [] {
    Sweep w;
    w.base = load_scenario(std::string(STRATA_SOURCE_DIR) + "/configs/scenarios/gpt3-175b-explore.json");
    Space space = *w.base.space;
    space.gpus = w.base.cluster.gpus();
    Scenario pt = w.base;
    pt.space.reset();
    for (std::uint64_t i = 0; i < space.size(); ++i) {
      space_point(w.base, space, i, pt.plan, pt.batch);
      if (first_violation(pt)) continue;
      try {
        if (!estimate_memory(pt).feasible()) continue;
      } catch (const strata::InputError&) {
        continue;
      }
      w.feasible.push_back(pt);
    }
    return w;
  }();
  return s;
}

void score_loop(benchmark::State& state, const Scorer& scorer, std::size_t stride) {
  const auto& plans = sweep().feasible;
  std::size_t i = 0;
  for (auto _ : state) {
    const Score s = scorer(plans[i]);
    benchmark::DoNotOptimize(s.step.step_time);
    i = (i + stride) % plans.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["feasible_plans"] = static_cast<double>(plans.size());
}

void BM_ScoreCoarse(benchmark::State& state) {
  score_loop(state, coarse_scorer(sweep().base), 1);
}
BENCHMARK(BM_ScoreCoarse)->Unit(benchmark::kMicrosecond)->Iterations(38916);

const std::vector<Scenario>& llama_plans() {
  static const std::vector<Scenario> plans = [] {
    const Scenario base =
        load_scenario(std::string(STRATA_SOURCE_DIR) + "/configs/scenarios/llama3-70b-explore.json");
    Space space = *base.space;
    space.gpus = base.cluster.gpus();
    Scenario pt = base;
    pt.space.reset();
    std::vector<Scenario> out;
    std::size_t feasible = 0;
    for (std::uint64_t i = 0; i < space.size(); ++i) {
      space_point(base, space, i, pt.plan, pt.batch);
      if (first_violation(pt)) continue;
      try {
        if (!estimate_memory(pt).feasible()) continue;
      } catch (const strata::InputError&) {
        continue;
      }
      if (feasible++ % 61 == 0) out.push_back(pt);
    }
    return out;
  }();
  return plans;
}

void BM_Replay(benchmark::State& state) {
  const auto& plans = llama_plans();
  const bool layer = state.range(0) == 1;
  const ReplayOptions o{.every_stage = false, .steady_state = state.range(1) == 1};
  std::vector<ModelStepCosts> costs;
  costs.reserve(plans.size());
  for (const auto& sc : plans) costs.emplace_back(sc);
  ProgramWorkspace w;
  std::size_t i = 0;
  for (auto _ : state) {
    ReplayOptions with = o;
    with.workspace = &w;
    const ChunkPrediction pr =
        layer ? predict_replayed(plans[i], costs[i], with) : predict_chunks(plans[i], costs[i], with);
    benchmark::DoNotOptimize(pr.step.step_time);
    i = (i + 1) % plans.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["plans"] = static_cast<double>(plans.size());
}
// One pass over the sampled plans per run (the Iterations are the plan count).
BENCHMARK(BM_Replay)->ArgNames({"level", "steady"})->Args({0, 0})->Args({0, 1})->Unit(benchmark::kMillisecond)
    ->Iterations(640);
BENCHMARK(BM_Replay)->ArgNames({"level", "steady"})->Args({1, 0})->Args({1, 1})->Unit(benchmark::kMillisecond)
    ->Iterations(640);

void BM_ScoreLayer(benchmark::State& state) {
  score_loop(state, simulator_scorer(sweep().base), 97);
}
BENCHMARK(BM_ScoreLayer)->Unit(benchmark::kMillisecond)->Iterations(40);

// What the explorer does per plan beside scoring: the memory bound again
// and the results.jsonl line (report::result_line).
void BM_ResultLine(benchmark::State& state) {
  const auto& plans = sweep().feasible;
  const Scorer scorer = coarse_scorer(sweep().base);
  std::vector<Score> scores;
  for (std::size_t i = 0; i < 64; ++i) scores.push_back(scorer(plans[i * 97]));
  std::size_t i = 0, bytes = 0;
  for (auto _ : state) {
    const Scenario& sc = plans[i * 97];
    const MemoryEstimate mem = estimate_memory(sc);
    const double step_s = strata::to_seconds(scores[i].step.step_time);
    const ScoredPlan ranked{plan_id(sc.plan, sc.batch), step_s, mem.peak_bytes,
                            tokens_per_s_per_gpu(sc, step_s)};
    const std::string line = strata::report::result_line(ScoredOutcome{0, sc, mem, scores[i], ranked});
    bytes += line.size();
    i = (i + 1) % scores.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_ResultLine)->Unit(benchmark::kMicrosecond);

int agreement(std::size_t stride) {
  const auto& w = sweep();
  const Scorer coarse = coarse_scorer(w.base), layer = simulator_scorer(w.base);
  std::vector<double> exact, zero3, activations, both;
  std::size_t memory_differs = 0;
  for (std::size_t i = 0; i < w.feasible.size(); i += stride) {
    const Scenario& sc = w.feasible[i];
    const Score cs = coarse(sc), ls = layer(sc);
    const double c = static_cast<double>(cs.step.step_time);
    const double l = static_cast<double>(ls.step.step_time);
    memory_differs += cs.memory->peak_bytes != ls.memory->peak_bytes || cs.memory->breakdown != ls.memory->breakdown;
    const bool z3 = sc.plan.zero >= 3 && sc.plan.dp > 1, act = sc.plan.offload.activations;
    const double err = (c - l) / l;
    (!z3 && !act && !sc.plan.offload.weights ? exact : z3 && act ? both : z3 ? zero3 : activations).push_back(err);
    if (std::abs(err) > 0.1)
      std::printf("  %+6.1f %%: pp %lld %s v %lld, tp %lld, dp %lld, micro %lld, m %lld, zero %lld, recompute %s, offload activations %d\n",
                  100 * err, static_cast<long long>(sc.plan.pp),
                  std::string(strata::enum_name(sc.plan.schedule)).c_str(),
                  static_cast<long long>(sc.plan.virtual_stages), static_cast<long long>(sc.plan.tp),
                  static_cast<long long>(sc.plan.dp), static_cast<long long>(sc.batch.micro),
                  static_cast<long long>(microbatches(sc.plan, sc.batch)), static_cast<long long>(sc.plan.zero),
                  std::string(strata::enum_name(sc.plan.recompute)).c_str(), sc.plan.offload.activations ? 1 : 0);
  }
  auto report = [](const char* what, std::vector<double> e) {
    if (e.empty()) return;
    std::vector<double> a(e.size());
    std::transform(e.begin(), e.end(), a.begin(), [](double x) { return std::abs(x); });
    std::sort(a.begin(), a.end());
    std::sort(e.begin(), e.end());
    std::printf("%-28s plans %5zu  |err| median %6.2f %%  p90 %6.2f %%  max %6.2f %%  signed min %+6.2f %% max %+6.2f %%\n",
                what, e.size(), 100 * a[a.size() / 2], 100 * a[a.size() * 9 / 10], 100 * a.back(),
                100 * e.front(), 100 * e.back());
  };
  std::printf("feasible plans %zu, every %zu-th compared\n", w.feasible.size(), stride);
  report("chunk passes merged", exact);
  report("ZeRO-3", zero3);
  report("activation/weight offload", activations);
  report("both", both);
  std::printf("plans whose peak memory or its breakdown differ: %zu\n", memory_differs);
  return 0;
}

int profile(std::size_t stride) {
  const auto& w = sweep();
  std::map<std::string, std::pair<double, int>> groups;  // key -> (ms, plans)
  double total = 0;
  ProgramWorkspace ws;
  for (std::size_t i = 0; i < w.feasible.size(); i += stride) {
    const Scenario& sc = w.feasible[i];
    const ModelStepCosts costs(sc);
    SteadyStats st;
    // What predict_chunks does, with the extrapolation's outcome kept.
    const auto t0 = std::chrono::steady_clock::now();
    auto pr = predict_steady(sc, costs, Granularity::Chunk, {.every_stage = false}, ws, &st);
    if (!pr) pr = predict_chunks(sc, costs, {.every_stage = false, .workspace = &ws, .steady_state = false});
    benchmark::DoNotOptimize(pr->step.step_time);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    total += ms;
    char key[128];
    std::snprintf(key, sizeof key, "%-12s pp %3lld v %lld zero3 %d %-8s",
                  std::string(strata::enum_name(sc.plan.schedule)).c_str(), static_cast<long long>(sc.plan.pp),
                  static_cast<long long>(sc.plan.virtual_stages), sc.plan.zero >= 3 ? 1 : 0,
                  st.used ? "steady" : st.declined);
    auto& g = groups[key];
    g.first += ms;
    ++g.second;
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [k, v] : groups) {
    char line[192];
    std::snprintf(line, sizeof line, "%s  plans %4d  %7.3f ms each", k.c_str(), v.second, v.first / v.second);
    rows.emplace_back(v.first, line);
  }
  std::sort(rows.rbegin(), rows.rend());
  std::printf("%.0f ms over every %zu-th of %zu feasible plans (one core; classes not shared)\n", total, stride,
              w.feasible.size());
  for (const auto& [ms, line] : rows) std::printf("%5.1f %%  %s\n", 100 * ms / total, line.c_str());
  return 0;
}

// Where a scored plan's time goes: building the chunk program, replaying
// it, and the prediction from the run (every `stride`-th feasible plan,
// the whole program: no steady-state extrapolation).
int phases(std::size_t stride) {
  const auto& w = sweep();
  ProgramWorkspace ws;
  double build_ms = 0, replay_ms = 0, predict_ms = 0;
  std::size_t tasks = 0, plans = 0, flows = 0, shared = 0;
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  for (std::size_t i = 0; i < w.feasible.size(); i += stride) {
    const Scenario& sc = w.feasible[i];
    const ModelStepCosts costs(sc);
    const PipelineSchedule sched = make_schedule(sc.plan.schedule, static_cast<int>(sc.plan.pp),
                                                 static_cast<int>(sc.plan.virtual_stages),
                                                 static_cast<int>(microbatches(sc.plan, sc.batch)));
    // The least of three runs of each phase: the machine is shared.
    double b = 1e300, r = 1e300, q = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      build_step_program(sc, costs, Granularity::Chunk, nullptr, &sched, ws);
      const auto t1 = Clock::now();
      replay(ws.program, ws);
      const auto t2 = Clock::now();
      const StepPrediction pr = prediction(sc, ws.program, ws.run, false);
      benchmark::DoNotOptimize(pr.step_time);
      const auto t3 = Clock::now();
      b = std::min(b, ms(t0, t1));
      r = std::min(r, ms(t1, t2));
      q = std::min(q, ms(t2, t3));
    }
    build_ms += b;
    replay_ms += r;
    predict_ms += q;
    tasks += ws.program.tasks.size();
    for (const auto& t : ws.program.tasks) flows += t.flow >= 0;
    shared += ws.run.shared_links;
    ++plans;
  }
  const double total = build_ms + replay_ms + predict_ms;
  std::printf("%zu plans, %zu tasks: build %.0f ms (%.1f ns/task), replay %.0f ms (%.1f ns/task), "
              "prediction %.0f ms; %.3f ms a plan\n",
              plans, tasks, build_ms, 1e6 * build_ms / static_cast<double>(tasks), replay_ms,
              1e6 * replay_ms / static_cast<double>(tasks), predict_ms, total / static_cast<double>(plans));
  std::printf("%zu tasks with a flow on links (%.0f %% of the tasks); %zu plans whose flows shared a link\n", flows,
              100.0 * static_cast<double>(flows) / static_cast<double>(tasks), shared);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--phases") == 0)
    return phases(argc >= 3 ? static_cast<std::size_t>(std::stoul(argv[2])) : 7);
  if (argc >= 2 && std::strcmp(argv[1], "--agreement") == 0)
    return agreement(argc >= 3 ? static_cast<std::size_t>(std::stoul(argv[2])) : 50);
  if (argc >= 2 && std::strcmp(argv[1], "--profile") == 0)
    return profile(argc >= 3 ? static_cast<std::size_t>(std::stoul(argv[2])) : 7);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
