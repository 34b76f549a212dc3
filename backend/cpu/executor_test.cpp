#include "backend/cpu/executor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/corpus.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/rng.hpp"
#include "costmodel/model_io.hpp"
#include "strategies/step_costs.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

using strategies::Plan;
using strategies::Scenario;

// A small GPT (hidden 64, 4 heads, ffn 256, vocabulary 32, 16 tokens) with
// `layers` blocks, on the cpu-local cluster, fp32, standard attention.
Scenario tiny(int layers, Plan plan, std::int64_t global, std::int64_t micro) {
  Scenario sc;
  sc.model.name = "tiny-exec";
  sc.model.layers = layers;
  sc.model.hidden = 64;
  sc.model.heads = 4;
  sc.model.kv_heads = 4;
  sc.model.ffn_hidden = 256;
  sc.model.vocab = 32;
  sc.model.seq_len = 16;
  sc.model.dropout = false;
  sc.cluster = cost::cluster_preset("cpu-local");
  sc.batch = {global, micro};
  plan.precision = cost::Precision::FP32;
  plan.implementation.attention = cost::AttentionKernel::Standard;
  sc.plan = plan;
  sc.cluster.node.gpus_per_node = plan.gpus();  // one rank thread per device
  return sc;
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

Reference reference(const Scenario& sc, const std::vector<Batch>& batches, float lr) {
  TrackingAllocator alloc;
  GptModel model(sc.model, alloc, 1);
  Sgd sgd(alloc, {.lr = lr, .momentum = 0.9f});
  Reference r;
  for (std::size_t s = 0; s < batches.size(); ++s) {
    model.zero_grads();
    r.loss.push_back(model.forward_backward(batches[s].tokens, batches[s].targets, sc.batch.global));
    if (s == 0)
      for (std::size_t i = 0; i < model.names().size(); ++i) {
        const auto g = model.grads()[i].span();
        r.grads[model.names()[i]].assign(g.begin(), g.end());
      }
    sgd.step(model.params(), model.grads());
  }
  for (std::size_t i = 0; i < model.names().size(); ++i) {
    const auto p = model.params()[i].span();
    r.params[model.names()[i]].assign(p.begin(), p.end());
  }
  return r;
}

// Largest |a − b| over the largest |b| of each tensor, over all tensors.
double worst_relative(const std::map<std::string, std::vector<float>>& a,
                      const std::map<std::string, std::vector<float>>& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, ref] : b) {
    const auto& got = a.at(name);
    REQUIRE(got.size() == ref.size());
    double diff = 0, scale = 1e-6;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[i] - ref[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
    }
    if (diff / scale > worst) {
      worst = diff / scale;
      *where = name;
    }
  }
  return worst;
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
  const Reference ref = reference(sc, batches, lr);
  Executor ex(sc, {.seed = 1, .lr = lr, .capture_gradients = true});
  CHECK(ex.ranks() == sc.plan.dp * sc.plan.pp);
  for (int s = 0; s < steps; ++s) {
    const StepResult r = ex.step(batches[static_cast<std::size_t>(s)].tokens,
                                 batches[static_cast<std::size_t>(s)].targets);
    CAPTURE(s);
    CHECK(r.loss == doctest::Approx(ref.loss[static_cast<std::size_t>(s)]).epsilon(1e-5));
    if (s == 0) {
      std::string where;
      const double g = worst_relative(ex.gradients(), ref.grads, &where);
      CAPTURE(where);
      CHECK(g < 1e-4);
    }
    // Every rank ran every task of its stage once: dp ranks per stage.
    CHECK(r.tasks.size() == ex.lowered().graph.num_tasks() * static_cast<std::size_t>(sc.plan.dp));
  }
  std::string where;
  const double p = worst_relative(ex.parameters(), ref.params, &where);
  CAPTURE(where);
  CHECK(p < 1e-4);
}

Plan plan_with(std::int64_t dp, std::int64_t pp, std::int64_t zero = 0) {
  Plan p;
  p.dp = dp;
  p.pp = pp;
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

TEST_CASE("cpu/executor: task times: every task of a rank's stage, in graph order, start <= end") {
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
  Plan p = plan_with(1, 1);
  p.tp = 2;
  CHECK(why(p).find("tensor parallelism") != std::string::npos);
  // Compression sends a whole gradient's message; ZeRO-2 reduce-scatters.
  p = plan_with(2, 1, 2);
  p.compression.method = strategies::CompressionMethod::TopK;
  CHECK(why(p).find("compression") != std::string::npos);
  p = plan_with(2, 1, 2);
  p.optimizer = strategies::Optimizer::Lamb;
  CHECK(why(p).find("elementwise") != std::string::npos);
  // A step with the wrong number of tokens.
  Executor ex(tiny(2, plan_with(1, 1), 4, 2));
  std::vector<std::int32_t> few(3, 0);
  CHECK_THROWS_AS(ex.step(few, few), Error);
}

}  // namespace strata::backend::cpu
