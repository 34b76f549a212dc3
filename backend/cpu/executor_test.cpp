#include "backend/cpu/executor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/common/corpus.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/test_scenario.hpp"
#include "backend/cpu/test_util.hpp"
#include "costmodel/model_io.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

using strategies::Plan;
using strategies::Scenario;

// A small GPT (hidden 64, 4 heads, ffn 256, vocabulary 32, 16 tokens) with
// `layers` blocks, on the cpu-local cluster, fp32, standard attention.
Scenario tiny(int layers, Plan plan, std::int64_t global, std::int64_t micro) {
  return test::small_gpt({.layers = layers}, plan, global, micro);
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
};

Batch batch_of(const Scenario& sc, std::uint64_t seed) {
  const MarkovCorpus corpus(sc.model.vocab, 7);
  Rng rng(seed);
  Batch b;
  const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
  b.tokens.resize(n);
  b.targets.resize(n);
  corpus.sample(b.tokens, b.targets, sc.batch.global, sc.model.seq_len, rng);
  return b;
}

// The plain single-rank step over the whole global batch: loss and gradients
// by parameter name, then the parameters after `steps` steps of SGD with
// momentum 0.9. (Momentum, not Adam: Adam's first step is lr·sign(g), so a
// gradient that is zero in exact arithmetic, like the attention key's bias,
// turns rounding noise into a full step of either sign.)
struct Reference {
  std::vector<double> loss;
  std::map<std::string, std::vector<float>> grads;  // of the first step
  std::map<std::string, std::vector<float>> params;  // after the last step
};

// With `one_step_stale` (PipeDream-2BW) the gradient of step t is taken at
// W(t − 1) and updates W(t): W(t + 1) = W(t) − lr·∇f(W(t − 1)), W(−1) = W(0).
Reference reference(const Scenario& sc, const std::vector<Batch>& batches, float lr,
                    bool one_step_stale = false) {
  TrackingAllocator alloc;
  GptModel model(sc.model, alloc, 1);
  Sgd sgd(alloc, {.lr = lr, .momentum = 0.9f});
  std::vector<Tensor> newest;
  if (one_step_stale)
    for (const auto& p : model.params()) newest.push_back(p.clone(alloc, MemTag::Params));
  Reference r;
  for (std::size_t s = 0; s < batches.size(); ++s) {
    model.zero_grads();
    r.loss.push_back(model.forward_backward(batches[s].tokens, batches[s].targets, sc.batch.global));
    if (s == 0)
      for (std::size_t i = 0; i < model.names().size(); ++i) {
        const auto g = model.grads()[i].span();
        r.grads[model.names()[i]].assign(g.begin(), g.end());
      }
    if (!one_step_stale) {
      sgd.step(model.params(), model.grads());
      continue;
    }
    for (std::size_t i = 0; i < newest.size(); ++i)
      std::memcpy(model.params()[i].data(), newest[i].data(), static_cast<std::size_t>(newest[i].bytes()));
    sgd.step(newest, model.grads());
  }
  for (std::size_t i = 0; i < model.names().size(); ++i) {
    const auto p = (one_step_stale ? newest[i] : model.params()[i]).span();
    r.params[model.names()[i]].assign(p.begin(), p.end());
  }
  return r;
}

// Runs `steps` executor steps of `sc` and compares loss, the first step's
// reduced gradients and the final parameters with one rank stepping the
// whole batch. fp32 tolerance: the summation order differs (microbatches,
// the ring's chunks), nothing else.
void check_equivalent(const Scenario& sc, int steps = 2) {
  set_blas_threads(1);
  const float lr = 0.1f;
  std::vector<Batch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(batch_of(sc, 100 + static_cast<std::uint64_t>(s)));
  const bool two_bw = sc.plan.pp > 1 && sc.plan.schedule == strategies::Schedule::PipeDream2BW;
  const Reference ref = reference(sc, batches, lr, two_bw);
  Executor ex(sc, {.seed = 1, .lr = lr, .capture_gradients = true});
  CHECK(ex.ranks() == sc.plan.dp * sc.plan.pp * sc.plan.tp * sc.plan.cp);
  for (int s = 0; s < steps; ++s) {
    const StepResult r = ex.step(batches[static_cast<std::size_t>(s)].tokens,
                                 batches[static_cast<std::size_t>(s)].targets);
    CAPTURE(s);
    CHECK(r.loss == doctest::Approx(ref.loss[static_cast<std::size_t>(s)]).epsilon(1e-5));
    if (s == 0) {
      std::string where;
      const double g = test::worst_relative(ex.gradients(), ref.grads, &where);
      CAPTURE(where);
      CHECK(g < 1e-4);
    }
    // Every rank ran every task of its stage once: dp·tp ranks per stage.
    CHECK(r.tasks.size() ==
          ex.lowered().graph.num_tasks() * static_cast<std::size_t>(sc.plan.dp * sc.plan.tp * sc.plan.cp));
  }
  std::string where;
  const double p = test::worst_relative(ex.parameters(), ref.params, &where);
  CAPTURE(where);
  CHECK(p < 1e-4);
}

Plan plan_with(std::int64_t dp, std::int64_t pp, std::int64_t zero = 0, std::int64_t tp = 1,
               bool sp = false) {
  Plan p;
  p.dp = dp;
  p.pp = pp;
  p.tp = tp;
  p.sequence_parallel = sp;
  p.zero = zero;
  p.optimizer = strategies::Optimizer::Momentum;  // as the reference
  return p;
}

}  // namespace

TEST_CASE("cpu/executor: every lowered task says what it does, as its id does") {
  // The ids are for people, TaskInfo for executors: they must agree. A plan
  // with pipeline, ZeRO-3, full recompute and offload covers most kinds.
  Plan p = plan_with(2, 2, 3);
  p.recompute = cost::Recompute::Full;
  p.offload.activations = true;
  const Scenario sc = tiny(4, p, 8, 2);
  const auto low = strategies::lower_step(sc, strategies::ModelStepCosts(sc));
  REQUIRE(low.info.size() == low.graph.num_tasks());
  using strategies::TaskOp;
  const std::vector<std::pair<std::string, TaskOp>> prefixes = {
      {"fwd/", TaskOp::Forward},          {"bwd/", TaskOp::Backward},
      {"recompute/", TaskOp::Recompute},  {"send-act/", TaskOp::SendActivation},
      {"send-grad/", TaskOp::SendGradient}, {"zero3-gather", TaskOp::Zero3Gather},
      {"zero3-reduce", TaskOp::Zero3Reduce}, {"offload/", TaskOp::Offload},
      {"prefetch/", TaskOp::Prefetch},    {"optimizer-step", TaskOp::OptimizerStep},
      {"embedding-tie", TaskOp::EmbeddingTie}, {"framework/", TaskOp::Framework}};
  std::set<TaskOp> seen;
  for (std::size_t i = 0; i < low.info.size(); ++i) {
    const auto& t = low.graph.tasks()[i];
    const std::string id = t.id.substr(t.id.find(':') + 1);
    const auto& info = low.info[i];
    bool matched = false;
    for (const auto& [prefix, op] : prefixes)
      if (id.rfind(prefix, 0) == 0) {
        CAPTURE(t.id);
        CHECK(info.op == op);
        matched = true;
      }
    CAPTURE(t.id);
    CHECK(matched);
    seen.insert(info.op);
    if (t.label.layer) CHECK(info.layer == *t.label.layer);
    if (t.label.microbatch && info.op != TaskOp::Framework) CHECK(info.microbatch == *t.label.microbatch);
  }
  CHECK(seen.size() == prefixes.size());
}

TEST_CASE("cpu/executor: one rank, two microbatches, equals the plain step") {
  // m = global / micro = 2 microbatches with loss scale 1/2 each add up to
  // the gradient of the mean over the batch of 4.
  check_equivalent(tiny(2, plan_with(1, 1), 4, 2));
}

TEST_CASE("cpu/executor: recompute policies give the plain step's loss and gradients") {
  // Recompute reruns the same ops on the same inputs: exact up to the
  // microbatch sums' order.
  for (auto policy : {cost::Recompute::Selective, cost::Recompute::Full, cost::Recompute::EveryK,
                      cost::Recompute::Sqrt}) {
    CAPTURE(enum_name(policy));
    Plan p = plan_with(1, 1);
    p.recompute = policy;
    p.recompute_k = 2;
    check_equivalent(tiny(4, p, 4, 2));
  }
}

TEST_CASE("cpu/executor: optimal recompute's per-layer choices give the plain step's loss and gradients") {
  // The solver's choices at budgets from the least it can reach to no
  // recompute's peak (one stage of 6 layers; a 1F1B pipeline of two stages
  // of 3): layers that keep all, drop the attention core, keep their input,
  // or keep nothing and are rerun from their segment's input — each
  // schedule exact up to the microbatch sums' order.
  std::set<char> kinds;
  for (const auto& [dp, pp] : {std::pair{1, 1}, std::pair{1, 2}}) {
    Plan p = plan_with(dp, pp);
    p.recompute = cost::Recompute::Optimal;
    Scenario sc = tiny(6, p, 4, 1);
    sc.model.seq_len = 64;  // attention scores worth dropping alone
    Plan none = p;
    none.recompute = cost::Recompute::None;
    Scenario plain = sc;
    plain.plan = none;
    const double hi = static_cast<double>(strategies::estimate_memory(plain).required_bytes);
    sc.plan.memory_budget_GiB = 1e-3;  // below anything: the least memory
    const double lo = static_cast<double>(strategies::estimate_memory(sc).required_bytes);
    std::set<std::string> seen;
    for (int i = 0; i <= 8; ++i) {
      sc.plan.memory_budget_GiB = (lo + (hi - lo) * i / 8) / static_cast<double>(kGiB);
      const auto keeps = strategies::keeps_pattern(strategies::estimate_memory(sc).layers.keeps);
      if (!seen.insert(keeps).second) continue;
      CAPTURE(keeps);
      CAPTURE(pp);
      kinds.insert(keeps.begin(), keeps.end());
      check_equivalent(sc);
    }
    CHECK(seen.size() >= 3);
  }
  CHECK(kinds == std::set<char>{'A', 'S', 'I', 'N'});
}

TEST_CASE("cpu/executor: activation offload moves saved tensors to the host pool and back") {
  // Same numbers as the plain step; the host pool peaks at the offloaded
  // activations and the device holds fewer activation bytes at its peak.
  Plan p = plan_with(1, 1);
  check_equivalent(tiny(3, p, 4, 2));
  p.offload.activations = true;
  const Scenario sc = tiny(3, p, 4, 2);
  check_equivalent(sc);
  set_blas_threads(1);
  Plan plain = plan_with(1, 1);
  Executor a(tiny(3, plain, 4, 2)), b(sc);
  const Batch in = batch_of(sc, 5);
  const auto ra = a.step(in.tokens, in.targets), rb = b.step(in.tokens, in.targets);
  const auto act = static_cast<std::size_t>(MemTag::Activations);
  CHECK(ra.memory[0].host.peak_total == 0);
  CHECK(rb.memory[0].host.peak[act] > 0);
  CHECK(rb.memory[0].host.current_total == 0);
  CHECK(rb.memory[0].device.peak[act] < ra.memory[0].device.peak[act]);
}

TEST_CASE("cpu/executor: the offload planners' choices give the plain step's loss and gradients") {
  // vdnn moves each layer's linear-layer inputs and keeps the rest on the
  // device; lifetime, priority and joint move whole layers (joint also
  // recomputes some), at a budget halfway between no savings and offloading
  // everything. One stage of 4 layers, and a 1F1B pipeline of two.
  std::set<std::string> swaps;
  for (const auto& [dp, pp] : {std::pair{1, 1}, std::pair{1, 2}}) {
    Plan p = plan_with(dp, pp);
    p.offload.activations = true;
    Scenario all = tiny(4, p, 4, 1);
    all.model.seq_len = 64;
    Scenario none = all;
    none.plan.offload.activations = false;
    const double hi = static_cast<double>(strategies::estimate_memory(none).peak_bytes);
    const double lo = static_cast<double>(strategies::estimate_memory(all).peak_bytes);
    for (auto planner : {strategies::OffloadPlanner::Vdnn, strategies::OffloadPlanner::Lifetime,
                         strategies::OffloadPlanner::Priority, strategies::OffloadPlanner::Joint}) {
      Scenario sc = all;
      sc.plan.offload.planner = planner;
      if (planner == strategies::OffloadPlanner::Joint) sc.plan.recompute = cost::Recompute::Optimal;
      if (planner == strategies::OffloadPlanner::Priority || planner == strategies::OffloadPlanner::Joint)
        sc.plan.memory_budget_GiB = (lo + hi) / 2 / static_cast<double>(kGiB);
      const auto est = strategies::estimate_memory(sc);
      const std::string got = strategies::keeps_pattern(est.layers.keeps) + " " +
                              strategies::swaps_pattern(est.layers.swaps);
      CAPTURE(got);
      CAPTURE(enum_name(planner));
      swaps.insert(strategies::swaps_pattern(est.layers.swaps));
      check_equivalent(sc);
    }
    // vdnn leaves part of each layer on the device: less on the host than all.
    set_blas_threads(1);
    Scenario vdnn = all;
    vdnn.plan.offload.planner = strategies::OffloadPlanner::Vdnn;
    Executor a(all), b(vdnn);
    const Batch in = batch_of(all, 5);
    const auto ra = a.step(in.tokens, in.targets), rb = b.step(in.tokens, in.targets);
    const auto act = static_cast<std::size_t>(MemTag::Activations);
    CHECK(rb.memory[0].host.peak[act] > 0);
    CHECK(rb.memory[0].host.peak[act] < ra.memory[0].host.peak[act]);
  }
  CHECK(swaps.size() >= 3);
}

TEST_CASE("cpu/executor: data parallelism over 2 and 4 ranks equals one rank with the same global batch") {
  // Each rank takes global/dp sequences with loss scale 1/(m·dp); the
  // bucketed ring all-reduce sums them into the global mean's gradient.
  check_equivalent(tiny(2, plan_with(2, 1), 8, 2));
  check_equivalent(tiny(2, plan_with(4, 1), 8, 1));
}

TEST_CASE("cpu/executor: ZeRO 1, 2 and 3 equal plain data parallelism and one rank") {
  // Reduce-scatter + sharded Adam + all-gather computes the same update
  // elementwise; ZeRO-3 gathers each layer before use and reduce-scatters
  // its gradients after every microbatch.
  for (int zero : {1, 2, 3}) {
    CAPTURE(zero);
    check_equivalent(tiny(2, plan_with(2, 1, zero), 8, 2));
  }
  check_equivalent(tiny(3, plan_with(4, 1, 3), 8, 1));
}

TEST_CASE("cpu/executor: a parameter server (push, server step, pull) equals all-reduce and one rank") {
  // Workers push each bucket's gradients to the first rank of their dp
  // group, which sums them, steps, and serves the weights every worker pulls.
  for (std::int64_t dp : {2, 4}) {
    CAPTURE(dp);
    Plan p = plan_with(dp, 1);
    p.dp_topology = strategies::DpTopology::ParameterServer;
    check_equivalent(tiny(2, p, 8, 2 * 2 / dp));
  }
  Plan p = plan_with(2, 2);
  p.dp_topology = strategies::DpTopology::ParameterServer;
  p.schedule = strategies::Schedule::OneFOneB;
  check_equivalent(tiny(2, p, 8, 2));
}

TEST_CASE("cpu/executor: weight offload fetches each layer's weights for its passes and equals the plain step") {
  // Layers' parameters live in the host pool; `fetch-weights-*` brings a
  // layer to the device for its forward and backward (and, on demand, a
  // segment's recompute), and the optimizer steps them in the host pool.
  for (auto policy : {cost::Recompute::None, cost::Recompute::Full, cost::Recompute::EveryK}) {
    CAPTURE(enum_name(policy));
    Plan p = plan_with(2, 1);
    p.offload.weights = true;
    p.recompute = policy;
    p.recompute_k = 2;
    check_equivalent(tiny(4, p, 8, 2));
  }
  Plan p = plan_with(1, 2);
  p.offload.weights = true;
  p.schedule = strategies::Schedule::OneFOneB;
  check_equivalent(tiny(2, p, 4, 1));
  // The device holds at most one layer's weights (here: 4 layers, so well
  // under the plain step's parameter bytes); the host holds all layers'.
  set_blas_threads(1);
  Plan q = plan_with(1, 1);
  const Scenario plain = tiny(4, q, 4, 2);
  q.offload.weights = true;
  const Scenario off = tiny(4, q, 4, 2);
  Executor a(plain), b(off);
  const Batch in = batch_of(plain, 5);
  const auto ra = a.step(in.tokens, in.targets), rb = b.step(in.tokens, in.targets);
  const auto params = static_cast<std::size_t>(MemTag::Params);
  CHECK(rb.memory[0].device.peak[params] < ra.memory[0].device.peak[params]);
  CHECK(rb.memory[0].host.current[params] > 0);
  CHECK(rb.memory[0].device.current[params] < ra.memory[0].device.current[params]);
}

TEST_CASE("cpu/executor: optimizer offload (ZeRO-Offload) steps on the host pool and equals the plain step") {
  // Gradients (or their ZeRO chunks) go to the host, the optimizer steps
  // fp32 master parameters there, the updated weights come back: the same
  // arithmetic, so the same numbers; the optimizer states live on the host.
  for (int zero : {0, 2, 3}) {
    CAPTURE(zero);
    Plan p = plan_with(zero == 0 ? 1 : 2, 1, zero);
    p.offload.optimizer = strategies::OffloadTarget::Cpu;
    check_equivalent(tiny(2, p, 8, 2));
  }
  // To NVMe (ZeRO-Infinity): the states live in files of the storage pool,
  // written back after each step and read before the next.
  for (int zero : {0, 2}) {
    CAPTURE(zero);
    Plan p = plan_with(zero == 0 ? 1 : 2, 1, zero);
    p.offload.optimizer = strategies::OffloadTarget::Nvme;
    check_equivalent(tiny(2, p, 8, 2));
  }
  {
    Plan p = plan_with(1, 1);
    p.offload.optimizer = strategies::OffloadTarget::Nvme;
    const Scenario sc = tiny(2, p, 4, 2);
    set_blas_threads(1);
    Executor ex(sc);
    const Batch in = batch_of(sc, 4);
    ex.step(in.tokens, in.targets);
    const auto r = ex.step(in.tokens, in.targets);
    const auto states = static_cast<std::size_t>(MemTag::OptimizerStates);
    CHECK(r.memory[0].storage.current[states] > 0);  // momentum, in files
    CHECK(r.memory[0].host.peak[states] == 0);
    CHECK(r.memory[0].device.peak[states] == 0);
  }
  Plan p = plan_with(2, 1, 2);
  p.offload.optimizer = strategies::OffloadTarget::Cpu;
  const Scenario sc = tiny(2, p, 8, 2);
  set_blas_threads(1);
  Executor ex(sc);
  const Batch in = batch_of(sc, 4);
  const auto r = ex.step(in.tokens, in.targets);
  const auto states = static_cast<std::size_t>(MemTag::OptimizerStates);
  for (const auto& m : r.memory) {
    CHECK(m.device.peak[states] == 0);
    CHECK(m.host.current[states] > 0);  // momentum, kept between steps
    CHECK(m.host.current[static_cast<std::size_t>(MemTag::Params)] > 0);  // the master chunk
  }
}

TEST_CASE("cpu/executor: pipeline schedules (GPipe, 1F1B, interleaved) equal no pipeline") {
  // Two stages exchange activations and gradients by send/recv; the tied
  // word embedding's gradient is all-reduced between the first and last stage.
  for (auto kind : {strategies::Schedule::GPipe, strategies::Schedule::OneFOneB}) {
    CAPTURE(enum_name(kind));
    Plan p = plan_with(1, 2);
    p.schedule = kind;
    check_equivalent(tiny(2, p, 4, 1));
  }
  Plan p = plan_with(1, 2);
  p.schedule = strategies::Schedule::Interleaved;
  p.virtual_stages = 2;
  check_equivalent(tiny(4, p, 4, 1));
}

TEST_CASE("cpu/executor: PipeDream-2BW equals one rank with one-step-stale gradients") {
  // 1F1B order with two weight versions: the step computes with W(t − 1)
  // and updates W(t). Three steps, so the staleness shows in the losses
  // (the reference, stepping the same rule on one rank, matches them; the
  // plain rule would not).
  Plan p = plan_with(1, 2);
  p.schedule = strategies::Schedule::PipeDream2BW;
  check_equivalent(tiny(2, p, 4, 1), 3);
  p = plan_with(2, 2);
  p.schedule = strategies::Schedule::PipeDream2BW;
  check_equivalent(tiny(2, p, 8, 2), 3);
  // The stale rule is not the synchronous one: the second step computes at
  // W(0) instead of W(1), so its loss differs (the first is the same).
  const Scenario sc = tiny(2, plan_with(1, 1), 4, 1);
  std::vector<Batch> batches;
  for (int s = 0; s < 3; ++s) batches.push_back(batch_of(sc, 100 + static_cast<std::uint64_t>(s)));
  const Reference sync = reference(sc, batches, 0.1f), stale = reference(sc, batches, 0.1f, true);
  CHECK(sync.loss[0] == stale.loss[0]);
  CHECK(std::fabs(sync.loss[1] - stale.loss[1]) > 1e-4);
}

TEST_CASE("cpu/executor: pipeline with data parallelism, ZeRO and recompute together") {
  // dp 2 × pp 2: four ranks; the last stage's copy of the tied embedding
  // is reduced over dp with the head and tied to the first stage's.
  Plan p = plan_with(2, 2, 1);
  p.recompute = cost::Recompute::Selective;
  check_equivalent(tiny(2, p, 8, 2));
  p.zero = 3;
  p.recompute = cost::Recompute::Full;
  p.offload.activations = true;
  check_equivalent(tiny(2, p, 8, 2));
  // Untied logits: the head owns its own matrix, no tie.
  Scenario untied = tiny(2, plan_with(2, 2, 0), 8, 2);
  untied.model.tied_embeddings = false;
  check_equivalent(untied);
}

TEST_CASE("cpu/executor: tensor parallelism (tp 2 and 4, with and without sequence parallelism) equals one rank") {
  // Megatron-LM's split: column-parallel qkv and MLP-up, row-parallel
  // projections all-reduced (reduce-scattered with SP), vocabulary-parallel
  // embedding and cross-entropy. Each rank starts from its slice of the
  // single-rank model; the gradients gathered from the slices must be the
  // single-rank gradients (fp32: the sums' order differs).
  for (std::int64_t tp : {2, 4})
    for (bool sp : {false, true}) {
      CAPTURE(tp);
      CAPTURE(sp);
      check_equivalent(tiny(2, plan_with(1, 1, 0, tp, sp), 4, 2));
    }
  // Untied logits: a vocabulary-split matrix of its own.
  Scenario untied = tiny(2, plan_with(1, 1, 0, 2, true), 4, 2);
  untied.model.tied_embeddings = false;
  check_equivalent(untied);
}

TEST_CASE("cpu/executor: tensor parallelism with recompute and offload equals one rank") {
  // Recompute reruns the tp communication of the forward; offload moves the
  // local saved shards.
  for (auto policy : {cost::Recompute::Selective, cost::Recompute::Full, cost::Recompute::EveryK}) {
    CAPTURE(enum_name(policy));
    Plan p = plan_with(1, 1, 0, 2, true);
    p.recompute = policy;
    p.recompute_k = 2;
    check_equivalent(tiny(4, p, 4, 2));
  }
  Plan p = plan_with(1, 1, 0, 2, false);
  p.offload.activations = true;
  check_equivalent(tiny(2, p, 4, 2));
}

TEST_CASE("cpu/executor: tensor parallelism with data parallelism, ZeRO and pipelines equals one rank") {
  // tp 2 × dp 2 (ZeRO 0, 1, 3): each tp rank's buckets hold its slices; with
  // SP the norms' gradients are summed over tp before the step.
  for (int zero : {0, 1, 3}) {
    CAPTURE(zero);
    check_equivalent(tiny(2, plan_with(2, 1, zero, 2, true), 8, 2));
  }
  // tp 2 × pp 2 with 1F1B: the stages exchange row shards under SP.
  Plan p = plan_with(1, 2, 0, 2, true);
  p.schedule = strategies::Schedule::OneFOneB;
  check_equivalent(tiny(2, p, 4, 1));
  p.sequence_parallel = false;
  check_equivalent(tiny(2, p, 4, 1));
}

TEST_CASE("cpu/executor: context parallelism (cp 2 and 4, load-balanced chunks) equals one rank") {
  // Each rank runs its 2 of the 2·cp chunks of every sequence; attention
  // gathers the group's keys and values and returns their gradients; the
  // gradient reduction over dp × cp sums the parts.
  for (std::int64_t cp : {2, 4}) {
    CAPTURE(cp);
    Plan p = plan_with(1, 1);
    p.cp = cp;
    check_equivalent(tiny(2, p, 4, 2));
  }
  // With data and tensor (+ sequence) parallelism, a pipeline, recompute.
  Plan p = plan_with(2, 1);
  p.cp = 2;
  check_equivalent(tiny(2, p, 8, 2));
  p = plan_with(1, 1, 0, 2, true);
  p.cp = 2;
  p.recompute = cost::Recompute::Full;
  check_equivalent(tiny(2, p, 4, 2));
  p = plan_with(1, 2);
  p.cp = 2;
  p.schedule = strategies::Schedule::OneFOneB;
  check_equivalent(tiny(2, p, 4, 1));
}

TEST_CASE("cpu/executor: ZeRO over dp x cp (1, 2 and 3) equals one rank") {
  // The gradients are reduced over dp x cp, so ZeRO shards over those ranks
  // (Megatron-LM's distributed optimizer and torchtitan's FSDP do): cp 2 at
  // dp 1 shards in two, cp 2 beside dp 2 in four; the update is the same
  // elementwise.
  for (int zero : {1, 2, 3}) {
    CAPTURE(zero);
    Plan p = plan_with(1, 1, zero);
    p.cp = 2;
    check_equivalent(tiny(2, p, 4, 2));
    p = plan_with(2, 1, zero);
    p.cp = 2;
    check_equivalent(tiny(2, p, 8, 2));
  }
}

TEST_CASE("cpu/executor: context-parallel positions: chunks r and 2cp-1-r, all positions once") {
  // seq 16, cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  CHECK(ContextParallel::positions(16, 2, 0) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 12, 13, 14, 15});
  CHECK(ContextParallel::positions(16, 2, 1) ==
        std::vector<std::int32_t>{4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(ContextParallel::positions(5, 1, 0) == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  std::vector<int> seen(16, 0);
  for (int r = 0; r < 4; ++r)
    for (auto q : ContextParallel::positions(16, 4, r)) ++seen[static_cast<std::size_t>(q)];
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST_CASE("cpu/executor: a compressed exchange that keeps every entry equals plain data parallelism") {
  // Random-k with ratio 1 sends every gradient in fp32 at the same indices
  // on every rank: its encode, all-reduce and decode must give the plain
  // step's numbers. Covered: dp 2 and 4, ZeRO-1 (the optimizer steps its
  // chunk of the decoded gradient), dp 2 × pp 2 with a tied embedding (each
  // stage exchanges its part, then the two are tied), and ZeRO-1 with the
  // optimizer offloaded to the host.
  for (bool residual : {true, false}) {
    CAPTURE(residual);
    auto with = [&](Plan p) {
      p.compression.method = strategies::CompressionMethod::RandomK;
      p.compression.ratio = 1.0;
      p.compression.error_feedback = residual;
      return p;
    };
    check_equivalent(tiny(2, with(plan_with(2, 1)), 8, 2));
    check_equivalent(tiny(2, with(plan_with(4, 1)), 8, 1));
    check_equivalent(tiny(2, with(plan_with(2, 1, 1)), 8, 2));
    check_equivalent(tiny(2, with(plan_with(2, 2, 1)), 8, 2));
    Plan offload = with(plan_with(2, 1, 1));
    offload.offload.optimizer = strategies::OffloadTarget::Cpu;
    check_equivalent(tiny(2, offload, 8, 2));
    // With tensor parallelism (+ SP): each tp rank exchanges its slices.
    check_equivalent(tiny(2, with(plan_with(2, 1, 0, 2, true)), 8, 2));
  }
}

TEST_CASE("cpu/executor: memory per rank: ZeRO-3 and pipeline stages hold fewer parameter bytes") {
  // Params bytes at the peak: dp holds the whole model per rank; ZeRO-3 a
  // shard plus the layers gathered at once; each pipeline stage its layers.
  set_blas_threads(1);
  const auto params = static_cast<std::size_t>(MemTag::Params);
  const auto comm = static_cast<std::size_t>(MemTag::CommBuffers);
  auto peak = [&](const Plan& p) {
    const Scenario sc = tiny(4, p, 8, 2);
    Executor ex(sc);
    const Batch in = batch_of(sc, 9);
    return ex.step(in.tokens, in.targets).memory;
  };
  const auto dp = peak(plan_with(2, 1, 0));
  const auto z3 = peak(plan_with(2, 1, 3));
  const auto pp = peak(plan_with(1, 2, 0));
  CHECK(z3[0].device.peak[params] < dp[0].device.peak[params]);
  CHECK(dp[0].device.peak[comm] > 0);
  CHECK(pp[0].device.peak[params] < dp[0].device.peak[params]);
  CHECK(pp[1].device.peak[params] < dp[0].device.peak[params]);
  // After a step only parameters, gradients, optimizer states and staging live.
  for (const auto& m : z3) CHECK(m.device.current[static_cast<std::size_t>(MemTag::Activations)] == 0);
}

TEST_CASE("cpu/executor: task times: every task of a rank's stage, in graph order, start <= end; each pipeline receive names the send it completes") {
  set_blas_threads(1);
  const Scenario sc = tiny(2, plan_with(1, 2), 4, 1);
  Executor ex(sc);
  const Batch in = batch_of(sc, 3);
  const auto r = ex.step(in.tokens, in.targets);
  std::map<int, std::vector<TaskTime>> by_rank;
  for (const auto& t : r.tasks) by_rank[t.rank].push_back(t);
  REQUIRE(by_rank.size() == 2);
  for (const auto& [rank, ts] : by_rank) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      CHECK(ts[i].start <= ts[i].end);
      CHECK(*ex.lowered().graph.tasks()[static_cast<std::size_t>(ts[i].task)].label.stage == rank);
      if (i > 0) {
        CHECK(ts[i - 1].task < ts[i].task);
        CHECK(ts[i - 1].end <= ts[i].start);
      }
    }
  }
  CHECK(r.seconds > 0);
  // As a replay result: every task of the graph has its rank's times.
  const sim::RunResult run = ex.measured(r);
  REQUIRE(run.tasks.size() == ex.lowered().graph.num_tasks());
  for (const auto& t : r.tasks) {
    CHECK(run.tasks[static_cast<std::size_t>(t.task)].end >= run.tasks[static_cast<std::size_t>(t.task)].start);
    CHECK(run.tasks[static_cast<std::size_t>(t.task)].end <= run.makespan);
  }
  CHECK(run.makespan <= static_cast<Time>(r.seconds * 1e9) + 1);
  // Receipts: pp 2, 1F1B, 4 microbatches: stage 0 sends 4 activations,
  // stage 1 sends 4 gradients; each is received once, by the other stage's
  // rank, after its send began (the message cannot arrive before it is
  // posted) and within the step.
  const auto& info = ex.lowered().info;
  std::map<std::int32_t, double> send_start;
  for (const auto& t : r.tasks) {
    const strategies::TaskOp op = info[static_cast<std::size_t>(t.task)].op;
    if (op == strategies::TaskOp::SendActivation || op == strategies::TaskOp::SendGradient)
      send_start[t.task] = t.start;
  }
  REQUIRE(send_start.size() == 8);
  REQUIRE(r.receipts.size() == 8);
  std::set<std::int32_t> received;
  for (const auto& t : r.receipts) {
    CAPTURE(t.task);
    REQUIRE(send_start.count(t.task) == 1);
    const auto& label = ex.lowered().graph.tasks()[static_cast<std::size_t>(t.task)].label;
    CHECK(t.rank == 1 - *label.stage);  // the other stage's only rank
    CHECK(t.start <= t.end);
    CHECK(t.end >= send_start[t.task]);
    CHECK(t.end <= r.seconds);
    received.insert(t.task);
  }
  CHECK(received.size() == 8);  // each send received once
}

TEST_CASE("cpu/executor: a diverged run stops with the step and the loss named") {
  // SGD with momentum at lr 1e30: the first step's update makes the weights
  // astronomically large, so the second forward's logits overflow and the
  // loss is not finite. The step throws naming step 2 and the microbatch,
  // and the executor refuses further steps.
  set_blas_threads(1);
  const Scenario sc = tiny(2, plan_with(2, 1), 8, 2);
  Executor ex(sc, {.seed = 1, .lr = 1e30f});
  const Batch in = batch_of(sc, 3);
  CHECK(std::isfinite(ex.step(in.tokens, in.targets).loss));
  try {
    ex.step(in.tokens, in.targets);
    FAIL("the diverged step did not throw");
  } catch (const Error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("step 2") != std::string::npos);
    CHECK(what.find("loss of microbatch") != std::string::npos);
  }
  CHECK_THROWS_AS(ex.step(in.tokens, in.targets), Error);
}

TEST_CASE("cpu/executor: a device pool smaller than the step needs fails with OutOfMemory, predicted peak beside it") {
  // cpu-local's device pool is its GPU's memory_GiB; at 32 KiB the 4-rank
  // plan cannot even place its parameters; at 640 KiB it places them (and
  // the rings' staging, reserved for the step) and its first step runs out.
  // Each error names the rank and the pool, and the report adds the memory
  // model's predicted peak.
  set_blas_threads(1);
  for (const double kib : {32.0, 640.0}) {
    CAPTURE(kib);
    Scenario sc = tiny(2, plan_with(2, 2), 8, 2);
    sc.cluster.gpu.memory_GiB = kib / (1024.0 * 1024.0);
    bool placed = false;
    try {
      Executor ex(sc);
      placed = true;
      const Batch in = batch_of(sc, 3);
      ex.step(in.tokens, in.targets);
      FAIL("no OutOfMemory");
    } catch (const OutOfMemory& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(placed == (kib > 32));
      CHECK(what.find("device pool") != std::string::npos);
      CHECK(what.find("out of memory") != std::string::npos);
      CHECK(what.find("rank ") != std::string::npos);
      CHECK(e.capacity() == static_cast<Bytes>(kib * 1024));
      CHECK(e.live() + e.requested() > e.capacity());
      const std::string report = out_of_memory_report(e, sc);
      CHECK(report.find("predicts a peak of") != std::string::npos);
    }
  }
}

TEST_CASE("cpu/executor: refuses what it does not execute, naming it") {
  auto why = [](Plan p) {
    try {
      Executor ex(tiny(2, p, 8, 2));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Compression sends a whole gradient's message; ZeRO-2 reduce-scatters.
  Plan p = plan_with(2, 1, 2);
  p.compression.method = strategies::CompressionMethod::TopK;
  CHECK(why(p).find("compression") != std::string::npos);
  p = plan_with(2, 1, 2);
  p.optimizer = strategies::Optimizer::Lamb;
  CHECK(why(p).find("elementwise") != std::string::npos);
  // Dropout with tensor parallelism.
  Scenario dropout = tiny(2, plan_with(1, 1, 0, 2), 8, 2);
  dropout.model.dropout = true;
  try {
    Executor ex(dropout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("dropout") != std::string::npos);
  }
  // A step with the wrong number of tokens.
  Executor ex(tiny(2, plan_with(1, 1), 4, 2));
  std::vector<std::int32_t> few(3, 0);
  CHECK_THROWS_AS(ex.step(few, few), Error);
}

TEST_CASE("cpu/executor: each layer's forward keeps exactly the bytes its planned choice stores") {
  // The memory model's ActivationRule::stored(keep) is what a layer keeps
  // from its forward to its backward: all its saved tensors (A), all but the
  // attention core (S), its input (I), nothing (N). The executor's live
  // activation bytes must grow by exactly that across the layer's forward
  // task, for every solver's schedule: the fixed policies and optimal
  // recompute at budgets from the least it can reach to no recompute's peak,
  // on one stage and on a 1F1B pipeline of two with two microbatches. (The
  // peak adds the backward's working buffers, which the executor and the
  // model count differently: docs/accuracy.md, "Memory".)
  std::set<char> kinds;
  for (const auto& [pp, micro] : {std::pair{1, 4}, std::pair{2, 2}}) {
    std::vector<Scenario> cases;
    for (auto policy : {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full,
                        cost::Recompute::EveryK, cost::Recompute::Sqrt}) {
      Plan p = plan_with(1, pp);
      p.recompute = policy;
      p.recompute_k = 2;
      cases.push_back(tiny(6, p, 4, micro));
    }
    Plan opt = plan_with(1, pp);
    opt.recompute = cost::Recompute::Optimal;
    Scenario sc = tiny(6, opt, 4, micro);
    Scenario plain = sc;
    plain.plan.recompute = cost::Recompute::None;
    const double hi = static_cast<double>(strategies::estimate_memory(plain).required_bytes);
    sc.plan.memory_budget_GiB = 1e-3;
    const double lo = static_cast<double>(strategies::estimate_memory(sc).required_bytes);
    for (int i = 0; i <= 4; ++i) {
      sc.plan.memory_budget_GiB = (lo + (hi - lo) * i / 4) / static_cast<double>(kGiB);
      cases.push_back(sc);
    }
    for (Scenario& c : cases) {
      c.model.seq_len = 64;  // the attention core worth dropping alone
      const auto est = strategies::estimate_memory(c);
      const auto keeps = est.layers.keeps;
      const auto rule = strategies::ActivationRule::of(cost::expand(c.model, strategies::expand_options(c)).main_block(),
                                                       strategies::selective_policy(c.plan));
      CAPTURE(pp);
      CAPTURE(enum_name(c.plan.recompute));
      const std::string pattern = strategies::keeps_pattern(keeps);
      CAPTURE(pattern);
      kinds.insert(pattern.begin(), pattern.end());
      set_blas_threads(1);
      Executor e(c);
      const Batch in = batch_of(c, 5);
      const auto r = e.step(in.tokens, in.targets);
      const auto& tasks = e.lowered().graph.tasks();
      int checked = 0;
      for (std::size_t k = 1; k < r.tasks.size(); ++k) {
        const auto& t = r.tasks[k];
        const auto& info = e.lowered().info[static_cast<std::size_t>(t.task)];
        if (info.op != strategies::TaskOp::Forward || info.part != strategies::Part::Layer) continue;
        REQUIRE(r.tasks[k - 1].rank == t.rank);
        CAPTURE(tasks[static_cast<std::size_t>(t.task)].id);
        // A later stage's first layer keeps the activation it received,
        // counted as a message (comm_buffers) until then: its input joins.
        const auto& prev = e.lowered().info[static_cast<std::size_t>(r.tasks[k - 1].task)];
        const bool received = r.memory[static_cast<std::size_t>(t.rank)].stage > 0 &&
                              !(prev.op == strategies::TaskOp::Forward && prev.part == strategies::Part::Layer);
        CHECK(t.activations - r.tasks[k - 1].activations ==
              rule.stored(keeps[static_cast<std::size_t>(info.layer)]) + (received ? rule.input : 0));
        ++checked;
      }
      CHECK(checked == 6 * (4 / micro));  // every layer's forward, every microbatch
    }
  }
  CHECK(kinds == std::set<char>{'A', 'S', 'I', 'N'});
}

}  // namespace strata::backend::cpu
