// The CPU executor's measured memory against the step program's
// declarations (Scenario::kernel_memory Cpu: what backend/cpu/gpt.cpp and
// the executor allocate, task by task), per rank and per tag, over a matrix
// of plans: every recompute policy and solver x GPipe / 1F1B / interleaved
// x ZeRO 0-3 x activation, weight and optimizer offload, on 2 and 4 rank
// threads. A measured peak is then a check of the declarations: they hold
// to the byte, or the test names the plan, rank and tag that differ.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/validate.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"
#include "sim/names.hpp"
#include "lowering/memory.hpp"

namespace strata::backend::cpu {
namespace {

using strategies::OffloadTarget;
using strategies::Plan;
using strategies::Scenario;
using strategies::Schedule;

// Four layers (under interleaving two chunks of one layer per stage),
// hidden 32, 2 heads, ffn 128, vocabulary 16, 8 tokens, 4 microbatches of
// 2: a validate of one measured step takes milliseconds.
Scenario tiny(const Plan& plan) {
  Scenario sc;
  sc.model.name = "tiny-memory";
  sc.model.layers = 4;
  sc.model.hidden = 32;
  sc.model.heads = 2;
  sc.model.kv_heads = 2;
  sc.model.ffn_hidden = 128;
  sc.model.vocab = 16;
  sc.model.seq_len = 8;
  sc.model.dropout = false;
  sc.cluster = cost::cluster_preset("cpu-local");
  sc.batch = {8, 2};
  sc.plan = plan;
  sc.plan.precision = cost::Precision::FP32;
  sc.plan.implementation.attention = cost::AttentionKernel::Standard;
  sc.cluster.node.gpus_per_node = plan.gpus();
  return sc;
}

struct Case {
  std::string name;
  Scenario sc;
  bool refused = false;  // what the CPU executor's capability table refuses
};

enum class Offload { None, Activations, Weights, Optimizer };

void set_offload(Plan& p, Offload off) {
  p.offload.activations = off == Offload::Activations;
  p.offload.weights = off == Offload::Weights;
  if (off == Offload::Optimizer) p.offload.optimizer = OffloadTarget::Cpu;
}

std::vector<Case> matrix() {
  struct Policy {
    cost::Recompute recompute;
    const char* name;
    double budget_GiB;  // optimal recompute's (0: none)
  };
  // Optimal recompute at a budget below anything (the least memory it can
  // reach) and at one between that and no recompute.
  const Policy policies[] = {{cost::Recompute::None, "none", 0},        {cost::Recompute::Selective, "selective", 0},
                             {cost::Recompute::Full, "full", 0},        {cost::Recompute::EveryK, "every2", 0},
                             {cost::Recompute::Sqrt, "sqrt", 0},        {cost::Recompute::Optimal, "optimal-least", 1e-3},
                             {cost::Recompute::Optimal, "optimal-mid", -1}};
  const std::pair<Schedule, const char*> schedules[] = {
      {Schedule::GPipe, "gpipe"}, {Schedule::OneFOneB, "1f1b"}, {Schedule::Interleaved, "interleaved"}};
  const std::pair<Offload, const char*> offloads[] = {{Offload::None, ""},
                                                      {Offload::Activations, "+offload-activations"},
                                                      {Offload::Weights, "+offload-weights"},
                                                      {Offload::Optimizer, "+offload-optimizer"}};
  // (dp, pp): 2 and 4 rank threads.
  const std::pair<int, int> layouts[] = {{1, 2}, {2, 1}, {2, 2}};
  std::vector<Case> out;
  for (const auto& [dp, pp] : layouts)
    for (const auto& [sched, sname] : schedules) {
      if (pp == 1 && sched != Schedule::OneFOneB) continue;  // one stage: no schedule
      for (const Policy& pol : policies)
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (const auto& [off, oname] : offloads) {
            Plan p;
            p.dp = dp;
            p.pp = pp;
            p.schedule = pp > 1 ? sched : Schedule::OneFOneB;
            if (sched == Schedule::Interleaved) p.virtual_stages = 2;
            p.zero = zero;
            p.recompute = pol.recompute;
            p.recompute_k = 2;
            set_offload(p, off);
            Scenario sc = tiny(p);
            if (pol.budget_GiB > 0) sc.plan.memory_budget_GiB = pol.budget_GiB;
            if (pol.budget_GiB < 0) {
              Scenario plain = sc;
              plain.plan.recompute = cost::Recompute::None;
              sc.plan.memory_budget_GiB = 1e-3;
              const double lo = static_cast<double>(strategies::estimate_memory(sc).peak_bytes);
              const double hi = static_cast<double>(strategies::estimate_memory(plain).peak_bytes);
              sc.plan.memory_budget_GiB = (lo + hi) / 2 / static_cast<double>(kGiB);
            }
            const std::string name = "dp" + std::to_string(dp) + "-pp" + std::to_string(pp) +
                                     (pp > 1 ? std::string("-") + sname : "") + "-zero" + std::to_string(zero) + "/" +
                                     pol.name + oname;
            // The capability table: weight offload with ZeRO is not executed.
            const bool refused = off == Offload::Weights && zero > 0 && dp > 1;
            out.push_back({name, std::move(sc), refused});
          }
    }
  return out;
}

const sim::MemTag kTags[] = {sim::MemTag::Params,      sim::MemTag::Grads,       sim::MemTag::OptimizerStates,
                             sim::MemTag::Activations, sim::MemTag::CommBuffers, sim::MemTag::Workspace};

// One plan's measured step against its declarations: each rank's device
// peak, each tag's own peak and the host pool's peak; "" when they agree,
// else what differs.
std::string declaration_gaps(const Scenario& sc, std::set<std::string>& nonzero, int& with_host) {
  const ValidateReport r = validate(sc, {.steps = 1, .warmup = 1});
  REQUIRE(r.measured.ranks.size() == r.predicted.ranks.size());
  std::string gaps;
  for (std::size_t i = 0; i < r.measured.ranks.size(); ++i) {
    const RankPeaks& m = r.measured.ranks[i];
    const RankPeaks& p = r.predicted.ranks[i];
    const std::string rank = " rank " + std::to_string(m.rank) + ": ";
    if (p.peak != m.peak)
      gaps += rank + "peak " + std::to_string(p.peak) + " declared, " + std::to_string(m.peak) + " measured;";
    for (sim::MemTag t : kTags) {
      const auto k = static_cast<std::size_t>(t);
      if (m.by_tag[k] > 0) nonzero.insert(std::string(enum_name(t)));
      if (p.by_tag[k] != m.by_tag[k])
        gaps += rank + std::string(enum_name(t)) + " " + std::to_string(p.by_tag[k]) + " declared, " +
                std::to_string(m.by_tag[k]) + " measured;";
    }
    if (p.host_peak != m.host_peak)
      gaps += rank + "host " + std::to_string(p.host_peak) + " declared, " + std::to_string(m.host_peak) +
              " measured;";
    if (m.host_peak > 0) ++with_host;
  }
  return gaps;
}

// Plans checked one after another: each one the executor runs against its
// declarations (declaration_gaps), the others counted as refused, by name.
struct Sweep {
  int run = 0, refused = 0, with_host = 0;
  std::set<std::string> nonzero;
  // False when the executor refuses the plan.
  bool check(const std::string& name, const Scenario& sc) {
    CAPTURE(name);
    if (const auto why = Executor::unsupported(sc)) {
      MESSAGE(name << ": refused by the CPU executor: " << *why);
      ++refused;
      return false;
    }
    ++run;
    const std::string gaps = declaration_gaps(sc, nonzero, with_host);
    CHECK_MESSAGE(gaps.empty(), name << gaps);
    return true;
  }
};

TEST_CASE("cpu/memory: the measured peak equals the step program's declarations, per rank and tag, over the matrix") {
  // For every plan the CPU executor runs: each rank's device peak (all tags
  // at once), each tag's own peak, and the host pool's peak, measured over
  // one step after a warm-up step, equal the program's buffers swept in
  // the order the rank runs its tasks (validate's prediction for this
  // backend). Plans the capability table refuses are refused, by name.
  set_blas_threads(1);
  const std::vector<Case> cases = matrix();
  int run = 0, refused = 0, with_host = 0;
  std::set<char> keeps;
  std::set<std::string> nonzero;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const auto why = Executor::unsupported(c.sc);
    CHECK(why.has_value() == c.refused);
    if (why) {
      MESSAGE(c.name << ": refused by the CPU executor: " << *why);
      CHECK(why->find("weight offload with ZeRO") != std::string::npos);
      ++refused;
      continue;
    }
    ++run;
    const std::string pattern = strategies::keeps_pattern(strategies::estimate_memory(c.sc).layers.keeps);
    keeps.insert(pattern.begin(), pattern.end());
    const std::string gaps = declaration_gaps(c.sc, nonzero, with_host);
    CHECK_MESSAGE(gaps.empty(), c.name << gaps);
  }
  MESSAGE(run << " plans run, " << refused << " refused");
  // The matrix is what it says: every kind of per-layer choice, every tag,
  // host pools, and the refusals it expects.
  CHECK(keeps == std::set<char>{'A', 'S', 'I', 'N'});
  CHECK(nonzero == std::set<std::string>{"params", "grads", "optimizer_states", "activations", "comm_buffers",
                                         "workspace"});
  CHECK(with_host > 0);
  // Weight offload with ZeRO 1-3 on dp 2: one stage (one schedule) and two
  // stages (three), seven policies each.
  CHECK(refused == (1 + 3) * 7 * 3);
  CHECK(run + refused == static_cast<int>(cases.size()));
}

TEST_CASE("cpu/memory: tensor parallelism, with and without sequence parallelism, holds its declarations too") {
  // tp 2 alone, beside dp 2 and beside a 2-stage 1F1B pipeline, each with
  // and without sequence parallelism, under every recompute policy, ZeRO
  // 0-3 where dp > 1 and each offload: the tp ring's staging (two steps of
  // b·s·h / tp floats) is declared with the other communication buffers.
  set_blas_threads(1);
  const cost::Recompute policies[] = {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full,
                                      cost::Recompute::EveryK, cost::Recompute::Sqrt};
  const std::tuple<int, int> layouts[] = {{1, 1}, {2, 1}, {1, 2}};  // (dp, pp)
  Sweep sweep;
  for (const auto& [dp, pp] : layouts)
    for (const bool sp : {false, true})
      for (const cost::Recompute rc : policies)
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (const Offload off : {Offload::None, Offload::Activations, Offload::Weights, Offload::Optimizer}) {
            Plan p;
            p.dp = dp;
            p.pp = pp;
            p.tp = 2;
            p.sequence_parallel = sp;
            p.zero = zero;
            p.recompute = rc;
            p.recompute_k = 2;
            set_offload(p, off);
            const Scenario sc = tiny(p);
            const std::string name = "dp" + std::to_string(dp) + "-pp" + std::to_string(pp) + "-tp2" +
                                     (sp ? "-sp" : "") + "-zero" + std::to_string(zero) + "/" +
                                     std::string(enum_name(rc)) + "/" + std::to_string(static_cast<int>(off));
            sweep.check(name, sc);
          }
  MESSAGE(sweep.run << " tensor-parallel plans run, " << sweep.refused << " refused");
  CHECK(sweep.run >= 100);
  CHECK(sweep.nonzero.count("comm_buffers") == 1);
}

TEST_CASE("cpu/memory: context parallelism holds its declarations too") {
  // cp 2 and 4 alone, cp 2 beside dp 2, beside tp 2 and beside a 2-stage
  // 1F1B pipeline, under every recompute policy and each offload the
  // backend runs with cp, ZeRO 0-3 (sharded over dp x cp) without recompute
  // and ZeRO 3 with each policy: the keys and values gathered for the attention
  // core (forward, recompute, backward) and their gradients scattered back,
  // the cp ring's staging, and the gradients reduced over dp x cp are
  // declared, so the measured peaks equal the program's to the byte.
  set_blas_threads(1);
  const cost::Recompute policies[] = {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full,
                                      cost::Recompute::EveryK, cost::Recompute::Sqrt};
  const std::tuple<int, int, int, int> layouts[] = {{2, 1, 1, 1}, {4, 1, 1, 1}, {2, 2, 1, 1},
                                                    {2, 1, 2, 1}, {2, 1, 1, 2}};  // (cp, dp, tp, pp)
  Sweep sweep;
  for (const auto& [cp, dp, tp, pp] : layouts)
    for (const cost::Recompute rc : policies)
      for (int zero = 0; zero <= 3; zero += (rc == cost::Recompute::None ? 1 : 3))
      for (const Offload off : {Offload::None, Offload::Activations, Offload::Weights, Offload::Optimizer}) {
        Plan p;
        p.zero = zero;
        p.cp = cp;
        p.dp = dp;
        p.tp = tp;
        p.pp = pp;
        p.recompute = rc;
        p.recompute_k = 2;
        set_offload(p, off);
        Scenario sc = tiny(p);
        sc.model.seq_len = 16;  // 2·cp divides it: load-balanced chunks of the sequence
        const std::string name = "cp" + std::to_string(cp) + "-dp" + std::to_string(dp) + "-tp" + std::to_string(tp) +
                                 "-pp" + std::to_string(pp) + "-zero" + std::to_string(zero) + "/" +
                                 std::string(enum_name(rc)) + "/" + std::to_string(static_cast<int>(off));
        sweep.check(name, sc);
      }
  MESSAGE(sweep.run << " context-parallel plans run, " << sweep.refused << " refused");
  CHECK(sweep.run >= 150);
  CHECK(sweep.nonzero.count("comm_buffers") == 1);
}

TEST_CASE("cpu/memory: chunks holding only the embedding or only the head hold their declarations too") {
  // The first chunk the embedding alone (it sends the embedding's output
  // and receives the gradient its backward needs), the last the output
  // layer and loss alone: as stage_layers with 0 at either end, and as the
  // embedding_head_as_layers layout (4 layers + 2 over 4 interleaved chunks:
  // [0, 2, 2, 0]); alone and beside dp 2 with ZeRO 0-3, under four policies
  // and each offload the executor runs.
  set_blas_threads(1);
  struct Layout {
    const char* name;
    int pp;
    Schedule schedule;
    std::vector<std::int64_t> stage_layers;
  };
  const Layout layouts[] = {{"E|4|H", 3, Schedule::OneFOneB, {0, 4, 0}},
                            {"E|4|H-gpipe", 3, Schedule::GPipe, {0, 4, 0}},
                            {"E|4", 2, Schedule::OneFOneB, {0, 4}},
                            {"4|H", 2, Schedule::OneFOneB, {4, 0}},
                            {"interleaved-counted", 2, Schedule::Interleaved, {}}};
  const cost::Recompute policies[] = {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full,
                                      cost::Recompute::EveryK};
  Sweep sweep;
  int alone = 0;
  for (const Layout& l : layouts)
    for (const int dp : {1, 2})
      for (const cost::Recompute rc : policies)
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
          for (const Offload off : {Offload::None, Offload::Activations, Offload::Optimizer}) {
            Plan p;
            p.dp = dp;
            p.pp = l.pp;
            p.schedule = l.schedule;
            p.stage_layers = l.stage_layers;
            if (l.schedule == Schedule::Interleaved) {
              p.virtual_stages = 2;
              p.pipeline_layout = strategies::PipelineLayout::EmbeddingHeadAsLayers;
            }
            p.zero = zero;
            p.recompute = rc;
            p.recompute_k = 2;
            set_offload(p, off);
            const Scenario sc = tiny(p);
            const auto chunks = strategies::chunk_layers(sc.plan, sc.model.layers);
            const std::string name = std::string(l.name) + "-dp" + std::to_string(dp) + "-zero" +
                                     std::to_string(zero) + "/" + std::string(enum_name(rc)) + "/" +
                                     std::to_string(static_cast<int>(off));
            CAPTURE(name);
            REQUIRE((chunks.front() == 0 || chunks.back() == 0));
            if (sweep.check(name, sc)) alone += chunks.front() == 0 && chunks.back() == 0;
          }
  MESSAGE(sweep.run << " plans with embedding- or head-only chunks run, " << sweep.refused << " refused");
  CHECK(sweep.refused == 0);
  CHECK(sweep.run == 5 * (4 + 16) * 3);
  CHECK(alone == 3 * (4 + 16) * 3);
  CHECK(sweep.with_host > 0);
}

}  // namespace
}  // namespace strata::backend::cpu
