// Speed and footprint of the discrete-event engine on a large random graph.
//
// The graph: a seeded random layered DAG of 1,000,000 tasks. Each task has 1-3
// predecessors among the 1,000 tasks before it and runs on one of 64 streams;
// a quarter of the tasks are transfers over 16 shared links (one link, or a
// two-link path for one transfer in four), so max-min bandwidth sharing and
// completion rescheduling really happen. Building the graph is not timed.
//
//   BM_EngineEvents  — replay (Engine::run) of the compiled graph; items = tasks.
//                      Counters: bytes_per_task (engine state + result, from
//                      container capacities), edges (dependencies and stream
//                      order), events and stale events per task.
//   BM_EngineEventsWithMemory — the same graph where every task also
//                      allocates a buffer in its rank's pool (64 pools) that
//                      one of its successors frees: adds the live-bytes
//                      timelines, peaks and the alloc/free log.
//   BM_EngineCompile — checking and compiling the TaskGraph into flat arrays.
#include <benchmark/benchmark.h>

#include "costmodel/model_io.hpp"
#include "lowering/step_costs.hpp"

#include <memory>
#include <random>

#include "sim/engine.hpp"

namespace {

using namespace strata;
using namespace strata::sim;

constexpr int kTasks = 1'000'000;
constexpr int kStreams = 64;
constexpr int kLinks = 16;
constexpr int kWindow = 1'000;

TaskGraph build_graph(int n, std::uint32_t seed, bool with_buffers) {
  std::mt19937 rng(seed);
  TaskGraph g;
  std::vector<ResourceId> streams, links;
  std::vector<PoolId> pools;
  std::vector<BufferId> output;  // per task: its buffer, until a successor frees it
  std::vector<std::uint8_t> freed;
  for (int s = 0; s < kStreams; ++s) streams.push_back(g.add_stream(std::string("r").append(std::to_string(s)).append(".s")));
  for (int l = 0; l < kLinks; ++l) links.push_back(g.add_link(std::string("link").append(std::to_string(l)), 100 * kGB));
  if (with_buffers)
    for (int s = 0; s < kStreams; ++s)
      pools.push_back(g.add_pool(std::string("r").append(std::to_string(s)), 80 * kGiB));
  for (int i = 0; i < n; ++i) {
    Task t;
    t.id = std::to_string(i);
    const std::uint32_t stream = rng() % kStreams;
    t.resources.push_back(streams[stream]);
    if (rng() % 4 == 0) {
      t.kind = TaskKind::P2PSend;
      const std::uint32_t first = rng() % kLinks;
      t.resources.push_back(links[first]);
      if (rng() % 4 == 0) t.resources.push_back(links[(first + 1 + rng() % (kLinks - 1)) % kLinks]);
      t.duration = 1 + rng() % 2'000;                        // latency, ns
      t.transfer_bytes = 10'000 + rng() % 1'000'000;         // 0.1-10 us alone at 100 GB/s
    } else {
      t.duration = 1'000 + rng() % 10'000;                   // 1-11 us
    }
    const int preds = i == 0 ? 0 : 1 + static_cast<int>(rng() % 3);
    const int lo = std::max(0, i - kWindow);
    std::vector<TaskId> before;
    for (int k = 0; k < preds; ++k)
      before.push_back(TaskId{lo + static_cast<int>(rng() % static_cast<std::uint32_t>(i - lo))});
    if (with_buffers) {
      t.allocs.push_back(g.add_buffer({.id = std::string("out/").append(std::to_string(i)),
                                       .pool = pools[stream],
                                       .bytes = static_cast<Bytes>(1 + rng() % (64 * kMiB)),
                                       .tag = MemTag::Activations}));
      output.push_back(t.allocs.back());
      freed.push_back(0);
      if (!before.empty() && !freed[before[0].index]) {  // consume the first predecessor's output
        t.frees.push_back(output[before[0].index]);
        freed[before[0].index] = 1;
      }
    }
    const TaskId id = g.add_task(std::move(t));
    g.add_deps(before, id);
  }
  return g;
}

const TaskGraph& graph() {
  static const TaskGraph g = build_graph(kTasks, 42, false);
  return g;
}

const TaskGraph& graph_with_buffers() {
  static const TaskGraph g = build_graph(kTasks, 42, true);
  return g;
}

void run_engine(benchmark::State& state, const TaskGraph& g) {
  Engine engine(g);
  RunResult r;
  for (auto _ : state) {
    r = engine.run();
    benchmark::DoNotOptimize(r.makespan);
  }
  const double n = static_cast<double>(g.num_tasks());
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g.num_tasks()));
  state.counters["bytes_per_task"] =
      static_cast<double>(engine.state_bytes() + r.memory_bytes()) / n;
  state.counters["edges_per_task"] = static_cast<double>(g.num_edges()) / n;
  state.counters["events_per_task"] = static_cast<double>(r.events) / n;
  state.counters["stale_per_task"] = static_cast<double>(r.stale_events) / n;
  state.counters["makespan_ms"] = static_cast<double>(r.makespan) / 1e6;
}

void BM_EngineEvents(benchmark::State& state) { run_engine(state, graph()); }
BENCHMARK(BM_EngineEvents)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EngineEventsWithMemory(benchmark::State& state) { run_engine(state, graph_with_buffers()); }
BENCHMARK(BM_EngineEventsWithMemory)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EngineCompile(benchmark::State& state) {
  const TaskGraph& g = graph();
  for (auto _ : state) {
    Engine engine(g);
    benchmark::DoNotOptimize(engine.state_bytes());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(g.num_tasks()));
}
BENCHMARK(BM_EngineCompile)->Unit(benchmark::kMillisecond)->UseRealTime();

// One training step of GPT-3 175B on 1024 A100s (tp 8, pp 8 interleaved with
// 3 virtual stages, dp 16, microbatch 1: 96 microbatches per replica),
// lowered per layer with one representative rank per pipeline stage
// (configs/scenarios/gpt3-175b-1024-a100.json). Replay (the engine) and the
// whole prediction (lowering + compile + replay + attribution) are timed apart.
const strata::strategies::Scenario& gpt3_1024() {
  static const auto sc = [] {
    auto s = strata::strategies::Scenario{};
    s.model = strata::cost::model_preset("gpt3-175b");
    s.cluster = strata::cost::cluster_preset("dgx-a100-80g");
    s.cluster.nodes = 128;
    s.batch = {1536, 1};
    auto& p = s.plan;
    p.dp = 16;
    p.tp = 8;
    p.pp = 8;
    p.schedule = strata::strategies::Schedule::Interleaved;
    p.virtual_stages = 3;
    p.sequence_parallel = true;
    p.recompute = strata::cost::Recompute::Selective;
    p.zero = 1;
    p.implementation.attention = strata::cost::AttentionKernel::Standard;
    return s;
  }();
  return sc;
}

void BM_SimulateGpt3_1024(benchmark::State& state) {
  const auto& sc = gpt3_1024();
  const strata::strategies::ModelStepCosts costs(sc);
  const auto low = strata::strategies::lower_step(sc, costs);
  Engine engine(low.graph);
  RunResult r;
  for (auto _ : state) {
    r = engine.run();
    benchmark::DoNotOptimize(r.makespan);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(low.graph.num_tasks()));
  state.counters["tasks"] = static_cast<double>(low.graph.num_tasks());
  state.counters["step_s"] = static_cast<double>(r.makespan) / 1e9;
}
BENCHMARK(BM_SimulateGpt3_1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PredictGpt3_1024(benchmark::State& state) {
  const auto& sc = gpt3_1024();
  const strata::strategies::ModelStepCosts costs(sc);
  for (auto _ : state) {
    auto pr = strata::strategies::predict_step(sc, costs);
    benchmark::DoNotOptimize(pr.step_time);
  }
}
BENCHMARK(BM_PredictGpt3_1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
