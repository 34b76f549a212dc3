// The CUDA executor against the CPU executor on the same plans and weights:
// loss, gradients and parameters after two steps equal within fp32
// reordering; task times and memory as the executor promises. The "host"
// suite checks what needs no GPU (refusals) and runs everywhere.
#include "backend/cuda/executor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/common/corpus.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/test_util.hpp"
#include "backend/cuda/test_scenario.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"

namespace strata::backend::cuda {
namespace {

using sim::MemTag;
using strategies::Plan;
using strategies::Scenario;

Scenario tiny(int layers, Plan plan, std::int64_t global = 4, std::int64_t micro = 2) {
  return test::tiny_gpt(layers, plan, global, micro);
}

using test::Ids;
using test::ids_of;

// Two steps on both executors from the CPU executor's initial weights: the
// losses within 1e-5 relative, the first step's gradients and the final
// parameters within 1e-4 of each tensor's largest entry.
void check_equal_to_cpu(const Scenario& sc) {
  cpu::Executor ref(sc, {.seed = 1, .lr = 0.05f, .capture_gradients = true});
  Executor gpu(sc, {.seed = 1, .lr = 0.05f});
  gpu.set_parameters(ref.parameters());
  for (int s = 0; s < 2; ++s) {
    const Ids b = ids_of(sc, 100 + static_cast<std::uint64_t>(s));
    const auto want = ref.step(b.tokens, b.targets);
    const auto got = gpu.step(b.tokens, b.targets);
    CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-5));
    if (s == 0) {
      std::string where;
      const double g = cpu::test::worst_relative(gpu.gradients(), ref.gradients(), &where);
      CHECK_MESSAGE(g < 1e-4, "gradient of " << where << " off by " << g);
    }
  }
  std::string where;
  const double p = cpu::test::worst_relative(gpu.parameters(), ref.parameters(), &where);
  CHECK_MESSAGE(p < 1e-4, "parameter " << where << " off by " << p);
}

TEST_CASE("cuda/executor: one GPU, two microbatches, every recompute policy equals the CPU executor") {
  for (const auto policy : {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full,
                            cost::Recompute::EveryK, cost::Recompute::Sqrt}) {
    CAPTURE(static_cast<int>(policy));
    Plan p;
    p.recompute = policy;
    p.recompute_k = 2;
    check_equal_to_cpu(tiny(4, p));
  }
}

TEST_CASE("cuda/executor: activation offload (with and without full recompute) equals the CPU executor") {
  for (const auto policy : {cost::Recompute::None, cost::Recompute::Full}) {
    CAPTURE(static_cast<int>(policy));
    Plan p;
    p.recompute = policy;
    p.offload.activations = true;
    check_equal_to_cpu(tiny(3, p));
  }
}

TEST_CASE("cuda/executor: optimal recompute and the offload planners' per-layer choices equal the CPU executor") {
  // The lowering's choices at a budget halfway between no savings and the
  // least each reaches: optimal recompute (keep all, selective, input,
  // segments), and activation offload by the vdnn (linear layers' inputs
  // only), lifetime, priority and joint planners.
  Plan base;
  Scenario plain = tiny(4, base);
  plain.model.seq_len = 64;  // attention scores worth dropping alone
  const double hi = static_cast<double>(strategies::estimate_memory(plain).peak_bytes);
  for (const auto planner : {strategies::OffloadPlanner::All, strategies::OffloadPlanner::Vdnn,
                             strategies::OffloadPlanner::Lifetime, strategies::OffloadPlanner::Priority,
                             strategies::OffloadPlanner::Joint}) {
    CAPTURE(static_cast<int>(planner));
    Scenario sc = plain;
    const bool offload = planner != strategies::OffloadPlanner::All;
    sc.plan.offload.activations = offload;
    sc.plan.offload.planner = planner;
    if (!offload || planner == strategies::OffloadPlanner::Joint) sc.plan.recompute = cost::Recompute::Optimal;
    if (!offload || planner == strategies::OffloadPlanner::Priority || planner == strategies::OffloadPlanner::Joint) {
      sc.plan.memory_budget_GiB = 1e-3;
      const double lo = static_cast<double>(strategies::estimate_memory(sc).peak_bytes);
      sc.plan.memory_budget_GiB = (lo + hi) / 2 / static_cast<double>(kGiB);
    }
    check_equal_to_cpu(sc);
  }
}

TEST_CASE("cuda/executor: Adam and AdamW run; losses are finite and fall on the Markov corpus") {
  for (const auto o : {strategies::Optimizer::Adam, strategies::Optimizer::AdamW}) {
    Plan p;
    Scenario sc = tiny(2, p, 8, 4);
    sc.plan.optimizer = o;
    Executor gpu(sc, {.seed = 1, .lr = 1e-2f});
    double first = 0, last = 0;
    for (int s = 0; s < 40; ++s) {
      const Ids b = ids_of(sc, static_cast<std::uint64_t>(s));
      const double l = gpu.step(b.tokens, b.targets).loss;
      REQUIRE(std::isfinite(l));
      (s == 0 ? first : last) = l;
    }
    CHECK(first == doctest::Approx(std::log(32.0)).epsilon(0.05));
    CHECK(last < first - 0.3);
  }
}

TEST_CASE("cuda/executor: every task is timed in graph order on its stream; memory peaks by tag") {
  Plan p;
  p.offload.activations = true;
  const Scenario sc = tiny(3, p);
  Executor gpu(sc, {});
  const Ids b = ids_of(sc, 1);
  gpu.step(b.tokens, b.targets);
  const auto r = gpu.step(b.tokens, b.targets);
  REQUIRE(r.tasks.size() == gpu.lowered().graph.num_tasks());
  for (std::size_t i = 0; i < r.tasks.size(); ++i) {
    CHECK(r.tasks[i].task == static_cast<std::int32_t>(i));
    CHECK(r.tasks[i].start >= 0);
    CHECK(r.tasks[i].start <= r.tasks[i].end);
    CHECK(r.tasks[i].end <= r.seconds);
  }
  REQUIRE(r.memory.size() == 1);
  const auto& dev = r.memory[0].device;
  auto tag = [](MemTag t) { return static_cast<std::size_t>(t); };
  CHECK(dev.peak[tag(MemTag::Params)] > 0);
  CHECK(dev.peak[tag(MemTag::Grads)] == dev.peak[tag(MemTag::Params)]);
  CHECK(dev.peak[tag(MemTag::OptimizerStates)] == dev.peak[tag(MemTag::Params)]);  // momentum: one state
  CHECK(dev.peak[tag(MemTag::Workspace)] >= (Bytes{32} << 20));                    // cuBLAS's
  CHECK(dev.current[tag(MemTag::Activations)] == 0);
  CHECK(r.memory[0].host.peak_total > 0);  // offloaded activations
  CHECK(r.memory[0].host.current_total == 0);
  CHECK(gpu.reserved_peak() >= dev.peak_total);
  const auto run = gpu.measured(r);
  CHECK(run.makespan > 0);

  // Without offload the device holds more activations at the peak.
  Plan q;
  const Scenario plain = tiny(3, q);
  Executor g2(plain, {});
  g2.step(b.tokens, b.targets);
  const auto r2 = g2.step(b.tokens, b.targets);
  CHECK(r2.memory[0].device.peak[tag(MemTag::Activations)] > dev.peak[tag(MemTag::Activations)]);
  CHECK(r2.memory[0].host.peak_total == 0);
}

TEST_CASE("cuda/executor: with profile_gemms every matrix product of the step is timed") {
  // Per layer and microbatch: 4 linears forward, 8 backward (dx and dW),
  // attention's 2 + 4 batched products per sequence; plus the logits (3).
  Plan p;
  const Scenario sc = tiny(2, p, 2, 1);
  Executor gpu(sc, {.profile_gemms = true});
  const Ids b = ids_of(sc, 1);
  gpu.step(b.tokens, b.targets);
  const auto& g = gpu.gemms();
  CHECK(g.size() == static_cast<std::size_t>(2 * (2 * (12 + 6) + 3)));
  for (const auto& x : g) CHECK(x.seconds > 0);
}

TEST_CASE("cuda/executor: a NaN loss stops the run naming the microbatch") {
  Plan p;
  const Scenario sc = tiny(2, p);
  Executor gpu(sc, {.lr = 1e30f});
  const Ids b = ids_of(sc, 1);
  bool failed = false;
  for (int s = 0; s < 5 && !failed; ++s) {
    try {
      gpu.step(b.tokens, b.targets);
    } catch (const Error& e) {
      failed = true;
      const std::string w = e.what();
      CHECK((w.find("diverged") != std::string::npos || w.find("NaN or Inf") != std::string::npos));
    }
  }
  CHECK(failed);
  CHECK_THROWS_WITH_AS(gpu.step(b.tokens, b.targets), doctest::Contains("earlier step failed"), Error);
}

TEST_SUITE("host") {
  TEST_CASE("cuda/executor: refuses plans it does not run, saying why, without a GPU") {
    auto why = [](Plan p, auto edit) {
      Scenario sc = tiny(2, p);
      edit(sc);
      const auto w = Executor::unsupported(sc);
      return w ? *w : std::string();
    };
    Plan p;
    CHECK(why(p, [](Scenario&) {}).empty());
    CHECK(why(p, [](Scenario& s) { s.plan.dp = 2; }).find("runs on 2 GPUs") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.dp = 2; }).find("mpirun -n 2") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.pp = 2; }).find("not pipeline parallelism") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.precision = cost::Precision::BF16; }).find("fp32") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.implementation.attention = cost::AttentionKernel::Flash; })
              .find("standard") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.optimizer = strategies::Optimizer::Adam4bit; }).find("adam4bit") !=
          std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.plan.offload.weights = true; }).find("weight offload") != std::string::npos);
    CHECK(why(p, [](Scenario& s) { s.model.dropout = true; }).find("dropout") != std::string::npos);
  }
}

}  // namespace
}  // namespace strata::backend::cuda
