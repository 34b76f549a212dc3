#include "backend/cpu/validate.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <atomic>
#include <cmath>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/executor.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

using strategies::Plan;
using strategies::Scenario;

// A small GPT on cpu-local with dp 2 x pp 2, ZeRO-1, 1F1B, offload: every
// part of the report is exercised.
Scenario tiny_plan() {
  Scenario sc;
  sc.model.name = "tiny-validate";
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
  Plan p;
  p.dp = 2;
  p.pp = 2;
  p.zero = 1;
  p.schedule = strategies::Schedule::OneFOneB;
  p.precision = cost::Precision::FP32;
  p.implementation.attention = cost::AttentionKernel::Standard;
  sc.plan = p;
  sc.cluster.node.gpus_per_node = 4;
  return sc;
}

TEST_CASE("cpu/validate: the JSON holds predicted and measured with the contract's fields") {
  // The shape `strata validate --format json` promises (docs/validate.md):
  // both sides with step_time_s, peak_memory_bytes (the highest rank's),
  // bytes by tag and seconds by task kind; one task row per lowered task.
  // Timings are whatever this machine gives; only their presence and
  // consistency are checked.
  set_blas_threads(1);
  const Scenario sc = tiny_plan();
  const ValidateReport r = validate(sc, {.steps = 2, .warmup = 1});
  CHECK(r.ranks == 4);
  CHECK(r.step_times_s.size() == 2);
  const auto j = nlohmann::json::parse(render_validate_json(r));
  for (const char* side : {"predicted", "measured"}) {
    CAPTURE(side);
    const auto& s = j.at(side);
    CHECK(s.at("step_time_s").get<double>() > 0);
    CHECK(s.at("peak_memory_bytes").get<std::int64_t>() > 0);
    CHECK(s.at("memory_breakdown_bytes").at("params").get<std::int64_t>() > 0);
    CHECK(s.at("memory_breakdown_bytes").at("activations").get<std::int64_t>() > 0);
    CHECK(s.at("time_by_kind_s").at("forward").get<double>() > 0);
    CHECK(s.at("time_by_kind_s").at("backward").get<double>() > 0);
    CHECK(s.at("time_by_kind_s").at("p2p").get<double>() > 0);
    CHECK(s.at("time_by_kind_s").at("collective").get<double>() > 0);
    REQUIRE(s.at("memory_per_rank").size() == 4);
    // The peak is the highest rank's.
    std::int64_t most = 0;
    for (const auto& rk : s.at("memory_per_rank")) most = std::max(most, rk.at("peak_bytes").get<std::int64_t>());
    CHECK(s.at("peak_memory_bytes").get<std::int64_t>() == most);
  }
  CHECK(j.at("tasks").size() == r.tasks.size());
  CHECK(!r.tasks.empty());
  // The schedule replay: the graph with the measured task times, every
  // task timed by the executor; its error is against the measured step.
  const auto& replay = j.at("replay");
  CHECK(replay.at("step_time_s").get<double>() > 0);
  CHECK(replay.at("untimed_tasks").get<int>() == 0);
  CHECK(replay.at("error").get<double>() ==
        doctest::Approx(r.replayed_step_time_s / r.measured.step_time_s - 1));
  // Each rank's measured tasks were all run: every row has a measured time.
  for (const auto& t : r.tasks) CHECK(t.measured_s >= 0);
  // The GPU model's runtime is left out of the CPU prediction and said so.
  CHECK(j.at("excluded_bytes").at("runtime").get<std::int64_t>() > 0);
  // Each rank is predicted as its stage's representative: same stage as
  // measured, and ranks of one stage get the same figures.
  REQUIRE(r.predicted.ranks.size() == r.measured.ranks.size());
  for (std::size_t i = 0; i < r.measured.ranks.size(); ++i) {
    CHECK(r.predicted.ranks[i].stage == r.measured.ranks[i].stage);
    for (std::size_t k = 0; k < i; ++k)
      if (r.predicted.ranks[k].stage == r.predicted.ranks[i].stage)
        CHECK(r.predicted.ranks[k].peak == r.predicted.ranks[i].peak);
  }
}

// The CPU executor's tasks, each given 1 ms; the first rank to run each
// collective or pipeline transfer enters it 0.5 ms before the others.
class SkewedExecutor final : public StepExecutor {
 public:
  explicit SkewedExecutor(const Scenario& sc) : real_(sc) {}
  std::string_view backend() const override { return real_.backend(); }
  int ranks() const override { return real_.ranks(); }
  const strategies::LoweredStep& lowered() const override { return real_.lowered(); }
  bool serial_ranks() const override { return real_.serial_ranks(); }
  sim::RunResult measured(const StepResult& r) const override { return real_.measured(r); }
  StepResult step(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) override {
    StepResult r = real_.step(tokens, targets);
    std::vector<bool> seen(lowered().graph.num_tasks(), false);
    for (TaskTime& t : r.tasks) {
      const WorkKind k = work_kind(lowered().info[static_cast<std::size_t>(t.task)].op);
      const bool comm = k == WorkKind::Collective || k == WorkKind::P2p;
      t.start = comm && !seen[static_cast<std::size_t>(t.task)] ? -0.5e-3 : 0.0;
      t.end = 1e-3;
      seen[static_cast<std::size_t>(t.task)] = true;
    }
    // A pipeline receive is its send's other participant: 1 ms, never the
    // first to enter (its send ran before it).
    for (TaskTime& t : r.receipts) {
      t.start = 0.0;
      t.end = 1e-3;
    }
    r.seconds = 0.1;
    return r;
  }

 private:
  Executor real_;
};

TEST_CASE("cpu/validate: a collective or transfer counts from its last participant; the earlier ones waited") {
  // Closed form over the scripted times: every run of a task is 1 ms of its
  // own; a collective or transfer run by several ranks adds 0.5 ms of peer
  // wait (its first rank's early entry), one run by a single rank is all
  // its own (nobody to wait for: 1.5 ms). A pipeline receive is a run of
  // the send it completes. (Scripted receipts too: the executor's own are
  // on the real clock, which the scripted tasks are not.)
  set_blas_threads(1);
  Scenario sc = tiny_plan();
  sc.kernel_memory = strategies::KernelMemory::Cpu;
  SkewedExecutor ex(sc);
  const ValidateReport r = backend::validate(sc, ex, {.steps = 2, .warmup = 0});
  std::array<double, kWorkKinds> own{};
  double wait = 0;
  std::vector<int> runs(ex.lowered().graph.num_tasks(), 0);
  StepResult one = ex.step(std::vector<std::int32_t>(64, 0), std::vector<std::int32_t>(64, 0));
  for (const TaskTime& t : one.tasks) ++runs[static_cast<std::size_t>(t.task)];
  for (const TaskTime& t : one.receipts) ++runs[static_cast<std::size_t>(t.task)];
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i] == 0) continue;
    const WorkKind k = work_kind(ex.lowered().info[i].op);
    const bool comm = k == WorkKind::Collective || k == WorkKind::P2p;
    own[static_cast<std::size_t>(k)] += runs[i] * 1e-3 + (comm && runs[i] == 1 ? 0.5e-3 : 0.0);
    if (comm && runs[i] > 1) wait += 0.5e-3;
  }
  CHECK(wait > 0);  // the plan has collectives several ranks run
  for (std::size_t k = 0; k < kWorkKinds; ++k) {
    CAPTURE(k);
    CHECK(r.measured.time_by_kind_s[k] == doctest::Approx(own[k] / r.ranks));
  }
  CHECK(r.measured_peer_wait_s == doctest::Approx(wait / r.ranks));
  const auto j = nlohmann::json::parse(render_validate_json(r));
  CHECK(j.at("measured_peer_wait_s").get<double>() == doctest::Approx(wait / r.ranks));
  CHECK(render_validate_table(r).find("peer wait") != std::string::npos);
}

TEST_CASE("cpu/validate: a stop request ends the measurement after one measured step, said in the report") {
  // The flag a signal sets, already set: the warm-up step runs, then one
  // measured step (the comparison needs one), then the report of that step
  // says it stopped after 1 of the 5 asked.
  set_blas_threads(1);
  const std::atomic<bool> stop{true};
  const ValidateReport r = validate(tiny_plan(), {.steps = 5, .warmup = 1, .stop = &stop});
  CHECK(r.stopped);
  CHECK(r.steps_asked == 5);
  REQUIRE(r.step_times_s.size() == 1);
  CHECK(r.measured.step_time_s == r.step_times_s[0]);
  const auto j = nlohmann::json::parse(render_validate_json(r));
  CHECK(j.at("stopped") == true);
  CHECK(j.at("steps") == 1);
  CHECK(j.at("steps_asked") == 5);
  CHECK(render_validate_table(r).find("1 measured steps of 5 asked (stopped by a signal)") != std::string::npos);
  // Unset, every asked step is measured.
  const std::atomic<bool> go{false};
  const ValidateReport all = validate(tiny_plan(), {.steps = 2, .warmup = 1, .stop = &go});
  CHECK(!all.stopped);
  CHECK(all.step_times_s.size() == 2);
}

TEST_CASE("cpu/validate: a compressed exchange reports its encode and decode as compression, its rounds as collectives") {
  // Top-k on dp 2 × pp 2: each stage has compress-encode, one round and
  // compress-decode; both sides give the compression kind time.
  set_blas_threads(1);
  Scenario sc = tiny_plan();
  sc.plan.compression.method = strategies::CompressionMethod::TopK;
  sc.plan.compression.ratio = 0.05;
  const ValidateReport r = validate(sc, {.steps = 1, .warmup = 1});
  const auto j = nlohmann::json::parse(render_validate_json(r));
  for (const char* side : {"predicted", "measured"}) {
    CAPTURE(side);
    CHECK(j.at(side).at("time_by_kind_s").at("compression").get<double>() > 0);
  }
  int encode = 0, round = 0, decode = 0;
  for (const auto& t : r.tasks) {
    if (t.id.find("compress-encode") != std::string::npos) encode += t.kind == WorkKind::Compression;
    if (t.id.find("compress-decode") != std::string::npos) decode += t.kind == WorkKind::Compression;
    if (t.id.find("dp-compressed/round") != std::string::npos) round += t.kind == WorkKind::Collective;
  }
  CHECK(encode == 2);
  CHECK(round == 2);
  CHECK(decode == 2);
  CHECK(work_kind_name(WorkKind::Compression) == "compression");
}

TEST_CASE("cpu/validate: a plan the executor refuses is an error, not a report") {
  Scenario sc = tiny_plan();
  sc.plan.schedule = strategies::Schedule::PipeDream;  // asynchronous: not executed
  CHECK_THROWS_AS(validate(sc, {.steps = 1}), Error);
}

TEST_CASE("cpu/validate: the kernels declare sequence parallelism's input gathered again in the backward") {
  // GptModel::whole_rows gathers a linear's input shard again for its
  // weight gradient: a plan leaving sp_regather_input to a stack's false
  // (torchtitan's) is declared true for the prediction beside a run; a
  // stated value stays (and false is refused by the capability table).
  Scenario sc = tiny_plan();
  sc.plan.implementation.sp_regather_input = false;
  Scenario declared = sc;
  Executor::declare_kernels(declared);
  CHECK(declared.plan.implementation.sp_regather_input);
  sc.implementation_keys.add(strategies::ImplKey::SpRegatherInput);
  declared = sc;
  Executor::declare_kernels(declared);
  CHECK_FALSE(declared.plan.implementation.sp_regather_input);
}

TEST_CASE("cpu/validate: the prediction beside a context-parallel run prices the K/V all-gather the kernels run") {
  // GptModel gathers K and V before each attention core: the prediction is
  // declared with cp_comm all_gather where the plan states none, and keeps
  // a stated all_gather (its price: step_costs_test.cpp); every layer's
  // forward and backward has its blocking cp collective task; a stated
  // p2p or all_gather_ring is refused.
  Scenario sc = tiny_plan();
  sc.plan.dp = 1;
  sc.plan.pp = 1;
  sc.plan.zero = 0;
  sc.plan.cp = 2;
  sc.cluster.node.gpus_per_node = 2;
  Scenario declared = sc;
  Executor::declare_kernels(declared);
  CHECK(declared.kernel_memory == strategies::KernelMemory::Cpu);
  CHECK(declared.plan.implementation.cp_comm == strategies::CpComm::AllGather);
  const auto r = validate(sc, {.steps = 1});
  int forward_gathers = 0, backward_gathers = 0;
  for (const TaskRow& t : r.tasks) {
    if (t.id.find(":cp-fwd/L") != std::string::npos && t.predicted_s > 0) ++forward_gathers;
    if (t.id.find(":cp-bwd/L") != std::string::npos && t.predicted_s > 0) ++backward_gathers;
  }
  // 4 layers × 4 microbatches (8 sequences, 2 each) on the one stage.
  CHECK(forward_gathers == 16);
  CHECK(backward_gathers == 16);
  sc.implementation_keys.add(strategies::ImplKey::CpComm);
  CHECK_THROWS_WITH_AS(validate(sc, {.steps = 1}), doctest::Contains("ring attention"), Error);
  sc.plan.implementation.cp_comm = strategies::CpComm::AllGatherRing;
  CHECK_THROWS_WITH_AS(validate(sc, {.steps = 1}), doctest::Contains("all_gather_ring"), Error);
}

}  // namespace
}  // namespace strata::backend::cpu
