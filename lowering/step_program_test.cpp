// The step program: one builder, two granularities, two interpreters.
#include "lowering/step_program.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "sim/engine.hpp"
#include "lowering/coarse.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/step_costs.hpp"
#include "explorer/explore.hpp"
#include "lowering/steady_state.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {
namespace {

Scenario auto_space(const std::string& model, const std::string& cluster, int global, const std::string& stack = "",
                    const std::string& space = "\"auto\"") {
  return parse_scenario("{\"model\": \"" + model + "\", \"cluster\": " + cluster +
                            ", \"batch\": {\"global\": " + std::to_string(global) +
                            "}, \"plan\": {\"precision\": \"bf16\", \"optimizer\": \"adamw\"}, \"space\": " + space +
                            (stack.empty() ? "" : ", \"stack\": \"" + stack + "\"") + "}",
                        "auto.json");
}

// AddressSanitizer's build: GCC defines __SANITIZE_ADDRESS__, clang answers
// __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Every `stride`-th valid plan of the scenario's space, from `offset`.
template <class Fn>
int for_plans(const Scenario& base, std::uint64_t stride, std::uint64_t offset, int most, Fn&& fn) {
  const Space& space = *base.space;
  Scenario sc = base;
  sc.space.reset();
  int n = 0;
  for (std::uint64_t i = offset; i < space.size() && n < most; i += stride) {
    sc.plan = base.plan;
    sc.batch = base.batch;
    space.apply(i, sc.plan, sc.batch);
    if (first_violation(sc)) continue;
    try {
      if (!fn(sc)) continue;
    } catch (const InputError&) {
      continue;  // a plan the cost model does not price (e.g. no link for a group)
    }
    ++n;
  }
  return n;
}

struct Counts {
  int plans = 0, offload = 0, zero3 = 0, merged = 0, wrong_prunes = 0;
  int flows = 0, shared = 0;  // plans with flows on links; whose flows met on one
  std::vector<double> over;   // analytical above the timeline, relative
  std::vector<double> under;  // analytical below it
  int under_resident = 0;     // by more than 1 % without offload
  double under_resident_most = 0;
  std::string under_resident_example;
  std::string over_example;
  std::vector<double> folded_err, folded_mem;  // chunk − layer, relative
  // How far above the layer level a folded figure may be (the fold's
  // approximation: see where it is set).
  double fold_tolerance = 0.005;
};

std::string spread(std::vector<double> e) {
  if (e.empty()) return "none";
  std::sort(e.begin(), e.end());
  std::vector<double> a(e.size());
  std::transform(e.begin(), e.end(), a.begin(), [](double x) { return std::abs(x); });
  std::sort(a.begin(), a.end());
  char buf[160];
  std::snprintf(buf, sizeof buf, "|err| median %.2f %%, p90 %.2f %%, max %.2f %%; signed %+.2f %% .. %+.2f %%",
                100 * a[a.size() / 2], 100 * a[a.size() * 9 / 10], 100 * a.back(), 100 * e.front(), 100 * e.back());
  return buf;
}

// The layer level (engine over the task graph) against the chunk level
// (replay of the merged program) and against the replay of the layer program.
bool compare(const Scenario& sc, Counts& n) {
  const ModelStepCosts costs(sc);
  // The layer level: the program's task graph replayed by the engine.
  sim::RunResult lrun;
  LoweredStep low;
  const StepPrediction layer = predict_step(sc, costs, &lrun, &low);
  const MemoryEstimate lmem = memory_from_run(sc, low, lrun);
  // Replay equals the engine on the same program, task by task (task i of
  // the graph is task i of the program).
  const StepProgram prog = build_step_program(sc, costs, Granularity::Layer);
  REQUIRE(prog.tasks.size() == low.graph.num_tasks());
  const ProgramRun mine = replay(prog);
  const ProgramRun theirs = from_engine(prog, lrun);
  n.flows += !prog.flows.empty();
  n.shared += mine.shared_links;
  REQUIRE(mine.makespan == theirs.makespan);
  bool same_tasks = true;
  for (std::size_t i = 0; i < prog.tasks.size(); ++i)
    same_tasks = same_tasks && mine.tasks[i].start == theirs.tasks[i].start && mine.tasks[i].end == theirs.tasks[i].end;
  CHECK(same_tasks);
  if (!same_tasks) {
    for (std::size_t i = 0; i < prog.tasks.size(); ++i)
      if (mine.tasks[i].start != theirs.tasks[i].start || mine.tasks[i].end != theirs.tasks[i].end) {
        MESSAGE("first diff task " << i << " " << task_id(prog, i) << " mine " << mine.tasks[i].start << ".." << mine.tasks[i].end
                << " engine " << theirs.tasks[i].start << ".." << theirs.tasks[i].end << " flow " << prog.tasks[i].flow
                << " lat " << (prog.tasks[i].flow >= 0 ? prog.flows[prog.tasks[i].flow].latency : -1) << " dur " << prog.tasks[i].duration
                << " plan " << canonical_json(sc.plan, sc.batch) << " " << sc.model.name);
        break;
      }
  }
  for (int s = 0; s < prog.stages; ++s) {
    const auto& x = mine.stages[static_cast<std::size_t>(s)];
    const auto& y = theirs.stages[static_cast<std::size_t>(s)];
    CHECK(x.gpu_peak == y.gpu_peak);
    CHECK(x.gpu_peak_by_tag == y.gpu_peak_by_tag);
    CHECK(x.host_peak == y.host_peak);
  }
  // The layer program replayed without the engine (what refines the kept
  // plans the explorer folded) is the layer level.
  const ChunkPrediction replayed = predict_replayed(sc, costs);
  CHECK(replayed.step.step_time == layer.step_time);
  CHECK(replayed.memory.peak_bytes == lmem.peak_bytes);
  CHECK(replayed.memory.breakdown == lmem.breakdown);
  // The chunk level equals the layer level: step time, breakdown, memory;
  // where it folds passes (ZeRO-3, offload), its step time is compared.
  const ChunkPrediction chunk = predict_chunks(sc, costs);
  ++n.plans;
  // The analytical model the explorer prunes with, as the explorer calls
  // it: a plan whose timeline fits must not be pruned. Where the analytical
  // peak is above the timeline's (a pruning bound should be below it), by
  // how much, reported.
  {
    const MemoryEstimate bound = pruning_memory(sc, costs);
    if (bound.peak_bytes > lmem.peak_bytes) {
      const double over = static_cast<double>(bound.peak_bytes - lmem.peak_bytes) / static_cast<double>(lmem.peak_bytes);
      if (n.over.empty() || over > *std::max_element(n.over.begin(), n.over.end()))
        n.over_example = canonical_json(sc.plan, sc.batch) + " " + sc.model.name;
      n.over.push_back(over);
    } else if (bound.peak_bytes < lmem.peak_bytes) {
      const double under = static_cast<double>(lmem.peak_bytes - bound.peak_bytes) /
                           static_cast<double>(lmem.peak_bytes);
      n.under.push_back(under);
      // Activation offload: the analytical model assumes the copies keep
      // pace with the compute (docs/memory-model.md), the timeline knows.
      if (under > 0.01 && !sc.plan.offload.activations && !sc.plan.offload.weights) {
        ++n.under_resident;
        if (under > n.under_resident_most) {
          n.under_resident_most = under;
          n.under_resident_example = canonical_json(sc.plan, sc.batch) + " " + sc.model.name;
        }
      }
    }
    if (!bound.feasible() && lmem.feasible()) ++n.wrong_prunes;
  }
  n.offload += sc.plan.offload.activations || sc.plan.offload.weights;
  n.zero3 += sc.plan.zero >= 3 && sc.plan.dp > 1;
  if (!chunk.exact) {
    // A folded pass waits for no transfer queued behind another pass's:
    // a bound the explorer refines (within 0.5 %: the layer-by-layer last
    // microbatch meets the folded ones' transfers).
    CAPTURE(canonical_json(sc.plan, sc.batch));
    const double tol = 1 + n.fold_tolerance;
    CHECK(static_cast<double>(chunk.step.step_time) <= tol * static_cast<double>(layer.step_time));
    CHECK(static_cast<double>(chunk.memory.peak_bytes) <= tol * static_cast<double>(lmem.peak_bytes));
    const double err = static_cast<double>(chunk.step.step_time - layer.step_time) / static_cast<double>(layer.step_time);
    n.folded_err.push_back(err);
    n.folded_mem.push_back(static_cast<double>(chunk.memory.peak_bytes - lmem.peak_bytes) / static_cast<double>(lmem.peak_bytes));
    return true;
  }
  CHECK(chunk.step.step_time == layer.step_time);
  CHECK(chunk.step.critical_stage == layer.critical_stage);
  for (std::size_t s = 0; s < layer.per_stage.size(); ++s) {
    const auto& a = chunk.step.per_stage[s];
    const auto& b = layer.per_stage[s];
    CHECK(a.compute == b.compute);
    CHECK(a.recompute == b.recompute);
    CHECK(a.exposed_comm == b.exposed_comm);
    CHECK(a.bubble == b.bubble);
    CHECK(a.offload_stall == b.offload_stall);
    CHECK(a.optimizer == b.optimizer);
  }
  CHECK(chunk.step.hardware_flops_per_step == layer.hardware_flops_per_step);
  CHECK(chunk.memory.peak_bytes == lmem.peak_bytes);
  CHECK(chunk.memory.breakdown == lmem.breakdown);
  CHECK(chunk.memory.host_bytes_per_node == lmem.host_bytes_per_node);
  for (std::size_t s = 0; s < lmem.stages.size(); ++s) CHECK(chunk.memory.stages[s].bytes == lmem.stages[s].bytes);
  n.merged += chunk.step.tasks < layer.tasks;
  return true;
}

TEST_CASE("step program: the chunk level equals the layer level, and replay equals the engine, on 1,000+ sampled plans") {
  // Plans sampled from the auto spaces of three models (every valid plan at
  // a fixed stride): the two levels are one program, so where the chunk
  // level merges passes exactly, step time, each stage's breakdown and peak
  // memory with its breakdown are equal; where it folds them (ZeRO-3,
  // offload) its figures are bounds; and the layer program's replay (what
  // refines folded plans) equals the layer level everywhere.
  Counts n;
  const Scenario small = auto_space("gpt3-1.3b", "{\"preset\": \"dgx-a100-80g\", \"nodes\": 1}", 64);
  const Scenario llama = auto_space("llama3-70b", "{\"preset\": \"dgx-h100\", \"nodes\": 8}", 512);
  const Scenario gpt3 = auto_space("gpt3-175b", "{\"preset\": \"dgx-a100-80g\", \"nodes\": 128}", 1536);
  auto cmp = [&](const Scenario& sc) { return compare(sc, n); };
  // The sanitized build (scripts/test.sh --sanitize, five times slower here)
  // compares a quarter of the plans, at four times the stride so the sample
  // still spans each space; the plain build compares them all.
  const int share = kSanitized ? 4 : 1;
  const int a = for_plans(small, 13 * share, 3, 800 / share, cmp);
  const int b = for_plans(llama, 601 * share, 11, 200 / share, cmp);
  const int c = for_plans(gpt3, 1499 * share, 5, 100 / share, cmp);
  // torchtitan's auto space adds its op-level selective checkpointing.
  const Scenario titan = auto_space("llama3-8b", "{\"preset\": \"dgx-h100\", \"nodes\": 2}", 128, "torchtitan");
  int sac = 0;
  const int d = for_plans(titan, 89 * share, 7, 120 / share, [&](const Scenario& sc) {
    if (sc.plan.recompute == Recompute::SelectiveOp) ++sac;
    return compare(sc, n);
  });
  CHECK(sac >= 10 / share);
  // The embedding and the head counted as layers: GPT-3 1.3B's 24 layers
  // over 24 or 12 chunks put the embedding and the head alone in the
  // first and last chunks (pp 8 with v 3, pp 4 with v 3 ...).
  const Scenario layout =
      auto_space("gpt3-1.3b", "{\"preset\": \"dgx-a100-80g\", \"nodes\": 1}", 64, "",
                 "{\"system\": \"auto\", \"pipeline_layout\": [\"embedding_head_as_layers\"]}");
  int alone = 0;
  // A stride that spans the space (its pipeline axes vary slowest).
  const std::uint64_t stride = layout.space->size() / 397 * share + 1;
  const int e = for_plans(layout, stride, 5, 160 / share, [&](const Scenario& sc) {
    const auto chunks = chunk_layers(sc.plan, sc.model.layers);
    if (chunks.front() == 0 || chunks.back() == 0) ++alone;
    return compare(sc, n);
  });
  CHECK(alone >= 10 / share);
  MESSAGE("plans compared: " << a << " small GPT, " << b << " Llama-3-70B, " << c << " GPT-3 175B, " << d
                             << " Llama-3-8B under torchtitan (" << sac << " selective_op), " << e
                             << " small GPT with the embedding and head counted as layers (" << alone
                             << " with a chunk of their own); " << n.offload
                             << " with offload, " << n.zero3 << " with ZeRO-3, " << n.merged << " merged exactly; "
                             << n.flows << " with flows on links, " << n.shared << " of them sharing a link at once; "
                             << n.folded_err.size() << " folded: step time " << spread(n.folded_err)
                             << "; peak memory " << spread(n.folded_mem));
  MESSAGE("the explorer's analytical memory above the timeline on " << n.over.size() << " plans: " << spread(n.over)
                                                                     << "; the most: " << n.over_example);
  MESSAGE("the explorer's analytical memory below the timeline on " << n.under.size() << " plans: "
                                                                     << spread(n.under) << "; by more than 1 % without offload on "
                                                                     << n.under_resident << ", at most " << 100 * n.under_resident_most
                                                                     << " %: " << n.under_resident_example);
  CHECK(n.wrong_prunes == 0);
  CHECK(n.plans >= 1000 / share);
  CHECK(n.offload >= 100 / share);
  CHECK(n.zero3 >= 100 / share);
  CHECK(n.merged >= 300 / share);
  // Both ways of timing flows are compared: alone (the recurrence) and
  // sharing a link (the engine).
  CHECK(n.shared >= 100 / share);
  CHECK(n.flows - n.shared >= 100 / share);
  CHECK(n.folded_err.size() >= static_cast<std::size_t>(300 / share));
}

TEST_CASE("step program: blocks of two kinds (a MoE model's dense first blocks): the levels agree") {
  // A small DeepSeek-like model (its first 2 of 8 blocks dense, shared and
  // routed experts) over its auto space on one DGX H100: the chunk level
  // sums each chunk's blocks kind by kind as the layer level emits them,
  // so where it merges passes exactly the figures are equal, and every
  // other check of compare() holds.
  const Scenario sc = parse_scenario(
      R"({"model": {"name": "mixed", "layers": 8, "hidden": 1024, "heads": 8, "ffn_hidden": 4096,
                    "seq_len": 1024, "vocab": 16000, "tied_embeddings": false,
                    "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024, "shared_experts": 1,
                            "first_dense": 2}},
          "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 32},
          "plan": {"precision": "bf16", "optimizer": "adamw"}, "space": "auto"})",
      "auto.json");
  Counts n;
  int pipelined = 0, experts = 0;
  const int share = kSanitized ? 4 : 1;
  const std::uint64_t stride = sc.space->size() / 1999 * share + 1;
  const int k = for_plans(sc, stride, 3, 120 / share, [&](const Scenario& plan) {
    pipelined += plan.plan.pp > 1;
    experts += plan.plan.ep > 1;
    return compare(plan, n);
  });
  MESSAGE("plans compared: " << k << " (" << pipelined << " pipelined, " << experts << " with ep > 1, "
                             << n.merged << " merged exactly, " << n.folded_err.size() << " folded)");
  CHECK(n.wrong_prunes == 0);
  CHECK(k >= 100 / share);
  CHECK(pipelined >= 30 / share);
  CHECK(experts >= 30 / share);
  CHECK(n.merged >= 30 / share);
}

TEST_CASE("step program: layer-chain models through both levels over their auto spaces") {
  // ResNet-50 (18 stages of 7 kinds) and VGG-19 (19 stages whose outputs
  // shrink from 12.8 MB to 4 KB a sample) on one DGX A100: a chain is an op
  // chain of Stage ops, so the two levels are one program (equal where
  // merged, bounds where folded), the pruning bound holds, and pipeline
  // messages follow each boundary's activations.
  Counts n;
  // Activation offload of a CNN's large early activations stalls on PCIe
  // for most of the step (ResNet-50, dp 4 pp 2, micro 2, full recompute:
  // 38 of 55 ms); a folded pass holds its stall inside, which moves the
  // pipeline's sends later than the layer level does (1.4 ms exposed), and
  // its memory is the analytical window of the largest layer's moved bytes,
  // which a stage of unequal layers exceeds: within 4 % here, against 0.5 %
  // for transformers' equal layers. The explorer re-simulates folded plans
  // it keeps per layer.
  n.fold_tolerance = 0.04;
  int pipelined = 0;
  const int share = kSanitized ? 4 : 1;
  for (const char* model : {"resnet50", "vgg19"}) {
    const Scenario sc = auto_space(model, "{\"preset\": \"dgx-a100-80g\", \"nodes\": 1}", 256);
    REQUIRE(sc.space->find(Axis::TP)->values.size() == 1);
    const std::uint64_t stride = sc.space->size() / 211 * share + 1;
    for_plans(sc, stride, 3, 100 / share, [&](const Scenario& plan) {
      pipelined += plan.plan.pp > 1;
      return compare(plan, n);
    });
  }
  MESSAGE("chain plans compared: " << n.plans << " (" << pipelined << " pipelined, " << n.merged
                                   << " merged exactly, " << n.folded_err.size() << " folded: step time "
                                   << spread(n.folded_err) << "; peak memory " << spread(n.folded_mem) << ")");
  CHECK(n.wrong_prunes == 0);
  CHECK(n.plans >= 150 / share);
  CHECK(pipelined >= 30 / share);
  CHECK(n.merged >= 20 / share);
}

// The steady state's extrapolation against the whole program's replay, at
// one granularity: equal to the nanosecond and to the byte where it is used.
struct SteadyCounts {
  int plans = 0, used = 0, interleaved = 0, folded = 0, layer = 0, zero3 = 0;
  std::map<std::string, int> declined;
};
bool compare_steady(const Scenario& sc, SteadyCounts& n) {
  const ModelStepCosts costs(sc);
  ++n.plans;
  for (Granularity g : {Granularity::Chunk, Granularity::Layer}) {
    // The layer level only on every fourth plan: its programs are large.
    if (g == Granularity::Layer && n.plans % 4 != 0) continue;
    ProgramWorkspace w;
    SteadyStats stats;
    const auto steady = predict_steady(sc, costs, g, {}, w, &stats);
    if (!steady) {
      ++n.declined[stats.declined];
      continue;
    }
    REQUIRE(stats.used);
    const ChunkPrediction whole =
        g == Granularity::Chunk ? predict_chunks(sc, costs, {.steady_state = false})
                                : predict_replayed(sc, costs, {.steady_state = false});
    const StepPrediction& x = steady->step;
    const StepPrediction& y = whole.step;
    CHECK(x.step_time == y.step_time);
    CHECK(x.tasks == y.tasks);
    CHECK(x.critical_stage == y.critical_stage);
    REQUIRE(x.per_stage.size() == y.per_stage.size());
    for (std::size_t s = 0; s < x.per_stage.size(); ++s) {
      CHECK(x.per_stage[s].compute == y.per_stage[s].compute);
      CHECK(x.per_stage[s].recompute == y.per_stage[s].recompute);
      CHECK(x.per_stage[s].exposed_comm == y.per_stage[s].exposed_comm);
      CHECK(x.per_stage[s].bubble == y.per_stage[s].bubble);
      CHECK(x.per_stage[s].offload_stall == y.per_stage[s].offload_stall);
      CHECK(x.per_stage[s].optimizer == y.per_stage[s].optimizer);
    }
    CHECK(x.hardware_flops_per_step == y.hardware_flops_per_step);
    CHECK(steady->memory.peak_bytes == whole.memory.peak_bytes);
    CHECK(steady->memory.breakdown == whole.memory.breakdown);
    CHECK(steady->memory.host_bytes_per_node == whole.memory.host_bytes_per_node);
    CHECK(steady->exact == whole.exact);
    ++n.used;
    n.layer += g == Granularity::Layer;
    n.interleaved += sc.plan.schedule == Schedule::Interleaved;
    n.folded += !whole.exact;
    n.zero3 += g == Granularity::Chunk && sc.plan.zero >= 3 && sc.plan.dp > 1;
  }
  return true;
}

TEST_CASE("step program: the steady state extrapolated equals the whole program replayed") {
  // Where two short programs (m₁ and m₁ + c microbatches) show the
  // pipeline's blocks repeating on every stage, a step of m microbatches is
  // the short one with (m − m₁)/c blocks more: step time, tasks, every
  // stage's breakdown and the memory peaks equal the whole program's replay
  // exactly, at both granularities, on plans sampled from two auto spaces
  // with many microbatches (1F1B, interleaved, ZeRO-3 and offload among
  // them). Where it declines, the caller replays the whole program.
  SteadyCounts n;
  const Scenario small = auto_space("gpt3-1.3b", "{\"preset\": \"dgx-a100-80g\", \"nodes\": 1}", 512);
  const Scenario llama = auto_space("llama3-70b", "{\"preset\": \"dgx-h100\", \"nodes\": 8}", 2048);
  auto cmp = [&](const Scenario& sc) { return compare_steady(sc, n); };
  for_plans(small, 7, 1, 200, cmp);
  for_plans(llama, 389, 3, 120, cmp);
  MESSAGE("plans: " << n.plans << "; extrapolated: " << n.used << " (" << n.layer << " at layer granularity, "
                    << n.interleaved << " interleaved, " << n.folded << " with folded passes, " << n.zero3
                    << " ZeRO-3 at chunk granularity)");
  for (const auto& [why, count] : n.declined) MESSAGE("declined (" << why << "): " << count);
  CHECK(n.used >= 80);
  CHECK(n.layer >= 15);
  CHECK(n.interleaved >= 15);
  CHECK(n.folded >= 15);
  // ZeRO-3's chunk programs repeat too: the last microbatch's layer-by-layer
  // pass gathers behind the compute lane, not at the start of the step
  // (where its first gathers, with no merged pass before them in the
  // gathers' prefetch window, would run in every program alike and break
  // the shift by Δ).
  CHECK(n.zero3 >= 10);
}

TEST_CASE("step program: task ids and buffer ids are rendered from the records") {
  // Two stages, two microbatches, 1F1B, dp 2: the ids DESIGN.md's example names.
  const Scenario sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 8, "micro": 2}, "plan": {"pp": 2, "dp": 2, "tp": 2, "recompute": "full"}})", "t.json");
  const ModelStepCosts costs(sc);
  const StepProgram p = build_step_program(sc, costs, Granularity::Layer);
  const sim::TaskGraph g = to_task_graph(p);
  REQUIRE(g.num_tasks() == p.tasks.size());
  CHECK(g.task("s0:fwd/embedding/mb0").index >= 0);
  CHECK(g.task("s0:fwd/L0/mb1").index >= 0);
  CHECK(g.task("s0:recompute/L0/mb0").index >= 0);
  CHECK(g.task("s0:tp-re/L0/mb0").index >= 0);
  CHECK(g.task("s0:send-act/c0/mb1").index >= 0);
  CHECK(g.task("s1:send-grad/c1/mb0").index >= 0);
  CHECK(g.task("s1:bwd/head/mb1").index >= 0);
  CHECK(g.task("s0:dp-reduce/bucket0").index >= 0);
  CHECK(g.task("s0:optimizer-step").index >= 0);
  CHECK(g.buffer("s0:act/L0/mb0").index >= 0);
  CHECK(g.buffer("s1:act/head/mb1").index >= 0);
  CHECK(g.buffer("s0:params").index >= 0);
  // Lanes carry their role: no one parses "s1.comm".
  const auto comm = g.at(g.resource("s1.comm"));
  CHECK(comm.role == sim::Role{1, sim::Lane::Comm});
  for (std::size_t i = 0; i < p.tasks.size(); ++i) {
    const auto& r = g.at(g.tasks()[i].resources.front());
    CHECK(r.role.stage == p.tasks[i].stage);
    CHECK(r.role.lane == p.tasks[i].lane);
  }
}

TEST_CASE("step program: weights on NVMe are read before every fetch and written back after the step") {
  // ZeRO-Infinity's offload_param on NVMe: each layer fetch is an NVMe
  // read on the host's lane (into staging) and then the copy to the GPU,
  // which waits for it; the host step's updated weights go back to NVMe.
  // Host memory holds them in the other plan, where neither task exists.
  auto program = [](const std::string& weights) {
    const Scenario sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-a100-80g",
        "batch": {"global": 16, "micro": 2}, "plan": {"dp": 8, "zero": 3,
        "offload": {"weights": )" + weights + R"(, "optimizer": "cpu"}}})", "t.json");
    return build_step_program(sc, ModelStepCosts(sc), Granularity::Layer);
  };
  auto count = [](const StepProgram& p, TaskOp op) {
    return std::count_if(p.info.begin(), p.info.end(), [&](const TaskInfo& t) { return t.op == op; });
  };
  const StepProgram host = program("true"), nvme = program("\"nvme\"");
  CHECK(count(host, TaskOp::WeightFromNvme) == 0);
  CHECK(count(host, TaskOp::WeightsToNvme) == 0);
  const auto fetches = count(nvme, TaskOp::WeightFetch);
  CHECK(fetches == count(host, TaskOp::WeightFetch));
  CHECK(fetches == 2 * 12 * 1);  // forward and backward of 12 layers, one microbatch per rank
  CHECK(count(nvme, TaskOp::WeightFromNvme) == fetches);
  CHECK(count(nvme, TaskOp::WeightsToNvme) == 1);
  std::size_t waited = 0;
  for (const auto& [before, after] : nvme.deps)
    if (nvme.info[static_cast<std::size_t>(before)].op == TaskOp::WeightFromNvme &&
        nvme.info[static_cast<std::size_t>(after)].op == TaskOp::WeightFetch) {
      ++waited;
      CHECK(nvme.tasks[static_cast<std::size_t>(before)].lane == sim::Lane::Cpu);
    }
  CHECK(waited == static_cast<std::size_t>(fetches));
  CHECK(replay(nvme).makespan > replay(host).makespan);
}

TEST_CASE("step program: a merged chunk pass holds, at its start, the most its layers hold") {
  // One stage, full recompute: the backward of a chunk reruns each layer
  // (+full) and holds its gradient (+grad) while the layers after it have
  // freed what they kept; at chunk granularity that peak is one Working
  // buffer, so both levels' peaks are equal (checked above on sampled
  // plans); here the merged tasks exist and carry it.
  const Scenario sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 64, "micro": 1}, "plan": {"dp": 8, "recompute": "full"}})", "t.json");
  const ModelStepCosts costs(sc);
  const StepProgram p = build_step_program(sc, costs, Granularity::Chunk);
  int merged_bwd = 0;
  for (const auto& t : p.tasks)
    if (t.merged && t.phase == sim::Phase::Bwd) {
      ++merged_bwd;
      const auto allocs = p.allocs(t);
      REQUIRE(allocs.size() == 1);
      CHECK(p.buffers[static_cast<std::size_t>(allocs[0])].kind == BufKind::Working);
      CHECK(p.buffers[static_cast<std::size_t>(allocs[0])].bytes > 0);
    }
  // m = 64 / 8 = 8 microbatches; the last one's backward runs layer by layer.
  CHECK(merged_bwd == 7);
}

// One stage whose tasks are hand-made transfers, each on a lane of its own,
// over links of round rates (GB/s = bytes per ns): NVLink 100, network 10,
// PCIe 20.
struct LinkProgram {
  StepProgram p;
  LinkProgram() {
    p.stages = 1;
    p.gpu_capacity = {0};
    p.host_capacity = {0};
    p.link_rates = {{100, 10, 20}};
  }
  std::int32_t add(sim::TaskKind kind, sim::Lane lane, const Transfer& x) {
    ProgramTask t;
    t.kind = kind;
    t.lane = lane;
    const auto [flow, alone] = add_flow(p, x, 0, 0);
    t.flow = flow;
    t.duration = alone;
    p.tasks.push_back(t);
    TaskInfo i;  // distinct ids for the task graph
    i.op = TaskOp::DpReduce;
    i.bucket = static_cast<std::int32_t>(p.info.size());
    p.info.push_back(i);
    return static_cast<std::int32_t>(p.tasks.size() - 1);
  }
  // Replay and the engine on the program's task graph, task by task.
  ProgramRun run() const {
    const ProgramRun mine = replay(p);
    const sim::RunResult theirs = sim::simulate(to_task_graph(p));
    CHECK(mine.makespan == theirs.makespan);
    for (std::size_t i = 0; i < p.tasks.size(); ++i) {
      CHECK(mine.tasks[i].start == theirs.tasks[i].start);
      CHECK(mine.tasks[i].end == theirs.tasks[i].end);
    }
    return mine;
  }
};

TEST_CASE("shared links: a transfer alone takes its time; two at once on a link share its rate") {
  // A network collective: 100 ns of latency, then 1,000 ns at the network's
  // 10 bytes/ns, the slowest of its links (network and PCIe, both ways):
  // 10,000 bytes. Alone it ends at 1,100 ns, exactly as a fixed task.
  {
    LinkProgram lp;
    const auto c = lp.add(sim::TaskKind::Collective, sim::Lane::Comm, Transfer{100, 1000, Path::Network});
    REQUIRE(lp.p.tasks[0].flow >= 0);
    CHECK(lp.p.flows[0].bytes == 10'000);
    CHECK(lp.p.tasks[0].duration == 1100);
    const ProgramRun r = lp.run();
    CHECK(!r.shared_links);
    CHECK(r.tasks[static_cast<std::size_t>(c)].end == 1100);
  }
  // A pipeline send on the same network at the same time: each moves its
  // 10,000 bytes at half the rate, 5 bytes/ns, so both end at 100 + 2,000.
  // A device-to-host copy beside them (1,000 ns alone at PCIe's 20 bytes/ns,
  // 20,000 bytes) has PCIe out to itself for the first 100 ns (2,000
  // bytes); then the network holds the two transfers at 5 each, and the
  // copy takes what PCIe has left, 20 − 2·5 = 10 bytes/ns: its other
  // 18,000 bytes end at 100 + 1,800 = 1,900. The network transfers stay at
  // 5 bytes/ns (the network is their bottleneck) and end at 2,100.
  {
    LinkProgram lp;
    const auto c = lp.add(sim::TaskKind::Collective, sim::Lane::Comm, Transfer{100, 1000, Path::Network});
    const auto s = lp.add(sim::TaskKind::P2PSend, sim::Lane::P2P, Transfer{100, 1000, Path::Network});
    const auto d = lp.add(sim::TaskKind::Copy, sim::Lane::D2H, Transfer{0, 1000, Path::HostOut});
    CHECK(lp.p.flows[2].bytes == 20'000);
    const ProgramRun r = lp.run();
    CHECK(r.shared_links);
    CHECK(r.tasks[static_cast<std::size_t>(c)].end == 2100);
    CHECK(r.tasks[static_cast<std::size_t>(s)].end == 2100);
    CHECK(r.tasks[static_cast<std::size_t>(d)].end == 1900);
    CHECK(r.makespan == 2100);
  }
  // A copy into the device uses PCIe the other way: no sharing with one out.
  {
    LinkProgram lp;
    lp.add(sim::TaskKind::Copy, sim::Lane::D2H, Transfer{0, 1000, Path::HostOut});
    const auto in = lp.add(sim::TaskKind::Copy, sim::Lane::H2D, Transfer{0, 1000, Path::HostIn});
    const ProgramRun r = lp.run();
    CHECK(!r.shared_links);
    CHECK(r.tasks[static_cast<std::size_t>(in)].end == 1000);
  }
  // Transfers one after another on one lane never share.
  {
    LinkProgram lp;
    lp.add(sim::TaskKind::Collective, sim::Lane::Comm, Transfer{0, 1000, Path::NvLink});
    const auto b = lp.add(sim::TaskKind::Collective, sim::Lane::Comm, Transfer{0, 500, Path::NvLink});
    const ProgramRun r = lp.run();
    CHECK(!r.shared_links);
    CHECK(r.tasks[static_cast<std::size_t>(b)].end == 1500);
  }
  // A path whose link is not modelled (rate 0), or a fixed time: no flow.
  {
    LinkProgram lp;
    lp.p.link_rates = {{0, 10, 20}};
    lp.add(sim::TaskKind::Collective, sim::Lane::Comm, Transfer{10, 1000, Path::NvLink});
    lp.add(sim::TaskKind::Collective, sim::Lane::P2P, Transfer{250});
    CHECK(lp.p.flows.empty());
    CHECK(lp.p.tasks[0].duration == 1010);
    CHECK(lp.p.tasks[1].duration == 250);
  }
}

TEST_CASE("shared links: Transfer::then joins bandwidth on one path and fixes the rest") {
  const Transfer a{10, 100, Path::Network}, b{5, 50, Path::Network}, c{7, 30, Path::NvLink};
  const Transfer ab = a.then(b);
  CHECK(ab.latency == 15);
  CHECK(ab.bandwidth == 150);
  CHECK(ab.path == Path::Network);
  const Transfer ac = a.then(c);  // NVLink after the network: its time is fixed here
  CHECK(ac.latency == 10 + 37);
  CHECK(ac.bandwidth == 100);
  CHECK(ac.path == Path::Network);
  const Transfer first = Transfer{}.then(c);  // nothing before: c's own path
  CHECK(first.latency == 7);
  CHECK(first.bandwidth == 30);
  CHECK(first.path == Path::NvLink);
  CHECK(Transfer{42}.total() == 42);
}

// A cost model's answers with no link rates: every transfer a fixed task,
// as the lowering priced them before links were shared.
struct Unshared final : StepCosts {
  explicit Unshared(const StepCosts& c) : c_(c) {}
  Time layer(const cost::Layer& l, Pass pass, bool sel) const override { return c_.layer(l, pass, sel); }
  Time layer_comm(const cost::Layer& l, CommKind k, Pass pass) const override { return c_.layer_comm(l, k, pass); }
  Transfer collective(Collective op, Group g, Bytes b) const override { return c_.collective(op, g, b); }
  Transfer p2p(Bytes b) const override { return c_.p2p(b); }
  Time elementwise(Bytes b) const override { return c_.elementwise(b); }
  Time gemm(Flops f) const override { return c_.gemm(f); }
  Transfer copy(Bytes b, CopyDir d) const override { return c_.copy(b, d); }
  Time optimizer_step(double params, bool on_host) const override { return c_.optimizer_step(params, on_host); }
  Time overhead_per_microbatch() const override { return c_.overhead_per_microbatch(); }
  Time overhead_per_step() const override { return c_.overhead_per_step(); }
  double interference_fraction() const override { return c_.interference_fraction(); }
  const StepCosts& c_;
};

TEST_CASE("shared links: a data-parallel reduction and the pipeline's sends on one NIC slow each other") {
  // GPT-3 13B over 4 DGX A100 nodes, pp 2 × dp 16: each stage's data-
  // parallel group spans two nodes, so its gradient buckets are all-reduced
  // over the network while the backward runs (overlap_grad_reduce), on the
  // same NIC that carries the stage's pipeline sends. Shared, the step is
  // longer than with every transfer alone.
  const Scenario sc = parse_scenario(R"({"model": "gpt3-13b", "cluster": {"preset": "dgx-a100-80g", "nodes": 4},
      "batch": {"global": 128, "micro": 1},
      "plan": {"pp": 2, "dp": 16, "precision": "bf16", "recompute": "full",
               "implementation": {"overlap_grad_reduce": true}}})", "t.json");
  const ModelStepCosts costs(sc);
  const StepProgram shared = build_step_program(sc, costs, Granularity::Layer);
  const StepProgram alone = build_step_program(sc, Unshared(costs), Granularity::Layer);
  REQUIRE(shared.tasks.size() == alone.tasks.size());
  CHECK(alone.flows.empty());
  CHECK(!shared.flows.empty());
  // Alone, a flow's task takes exactly the fixed task's time.
  for (std::size_t i = 0; i < shared.tasks.size(); ++i) CHECK(shared.tasks[i].duration == alone.tasks[i].duration);
  const ProgramRun a = replay(alone), b = replay(shared);
  CHECK(b.shared_links);
  CHECK(b.makespan > a.makespan);
  // No task ends earlier for sharing (the step program is monotone).
  bool later = true;
  for (std::size_t i = 0; i < shared.tasks.size(); ++i) later = later && b.tasks[i].end >= a.tasks[i].end;
  CHECK(later);
  MESSAGE("step alone " << to_seconds(a.makespan) << " s, shared " << to_seconds(b.makespan) << " s");
}

}  // namespace
}  // namespace strata::strategies
