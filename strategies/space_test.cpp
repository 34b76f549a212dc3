#include <doctest/doctest.h>

#include <set>
#include <string>

#include "sim/error.hpp"
#include "strategies/scenario.hpp"
#include "strategies/space.hpp"
#include "strategies/validate.hpp"
#include "tests/testing.hpp"

namespace strata::strategies {
namespace {

// GPT-2 small on one DGX H100 node (8 GPUs) with a space.
Scenario gpt2(const std::string& space, const std::string& plan = "{}") {
  return parse_scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
                            "batch": {"global": 64, "micro": 1}, "plan": )" +
                            plan + R"(, "space": )" + space + "}",
                        "s.json");
}

std::string error_of(const std::string& space) {
  return testing::input_error_of([&] { gpt2(space); });
}

std::vector<std::string> names(const Space& sp, Axis a) {
  std::vector<std::string> out;
  for (const auto& v : sp.find(a)->values) out.push_back(value_name(a, v));
  return out;
}

TEST_CASE("space: a space beyond 2^62 plans is refused when read, its size never wraps") {
  // Ten axes of 256 values: 2^80 plans.
  std::string values = "[1";
  for (int i = 2; i <= 256; ++i) values += ", " + std::to_string(i);
  values += "]";
  std::string axes;
  for (const char* a : {"tp", "pp", "cp", "ep", "dp", "virtual_stages", "recompute_k",
                        "offload.prefetch_depth", "batch.micro", "batch.global"})
    axes += std::string(axes.empty() ? "{" : ", ") + "\"" + a + "\": " + values;
  CHECK(error_of(axes + "}").rfind("s.json: space", 0) == 0);
  CHECK(error_of(axes + "}").find(": has more than 2^62 plans; list fewer values") != std::string::npos);
}

TEST_CASE("space: strict parsing names the JSON path") {
  CHECK(error_of(R"({"tq": [1, 2]})") == "s.json: space.tq: unknown key (did you mean \"tp\"?)");
  CHECK(error_of(R"({"tp": [1, 2, "4"]})") == "s.json: space.tp[2]: must be an integer, got a string");
  CHECK(error_of(R"({"tp": [1, 0]})") == "s.json: space.tp[1]: must be in [1, 1048576], got 0");
  CHECK(error_of(R"({"zero": [0, 4]})") == "s.json: space.zero[1]: must be in [0, 3], got 4");
  CHECK(error_of(R"({"recompute": ["none", "ful"]})") ==
        "s.json: space.recompute[1]: must be one of none|selective|full|every_k|sqrt|optimal|every_nth|selective_op (got \"ful\")");
  CHECK(error_of(R"({"implementation.overlap_grad_reduce": [true, 1]})") ==
        "s.json: space.implementation.overlap_grad_reduce[1]: must be true or false, got an integer");
  CHECK(error_of(R"({"batch.micro": [1, 2, 1]})") == "s.json: space.batch.micro[2]: duplicate value 1");
  CHECK(error_of(R"({"tp": []})") == "s.json: space.tp: must list at least one value");
  CHECK(error_of(R"({"tp": 4})") == "s.json: space.tp: must be \"auto\" or a list of values");
  CHECK(error_of(R"({"tp": "all"})") ==
        "s.json: space.tp: must be \"auto\" or a list of values (got \"all\")");
  CHECK(error_of(R"({"batch.global": "auto"})") ==
        "s.json: space.batch.global: has no \"auto\" values (it changes what is trained); list them");
  CHECK(error_of("3") == "s.json: space: must be \"auto\" or an object of axes");
  CHECK(error_of(R"("everything")") ==
        "s.json: space: must be \"auto\" or an object of axes (got \"everything\")");
  CHECK(error_of(R"({"system": true})") ==
        "s.json: space.system: must be \"auto\" (opens every system axis the space does not list)");
  CHECK(error_of(R"({"offload": "auto", "offload.weights": [false, true]})") ==
        "s.json: space.offload: conflicts with offload.activations, offload.weights and "
        "offload.optimizer: list either the composite axis or its parts");
  CHECK(error_of(R"({"schedule": ["1f1b:2"]})") ==
        "s.json: space.schedule[0]: \":N\" (virtual stages) applies only to interleaved (got \"1f1b:2\")");
  CHECK(error_of(R"({"schedule": ["interleaved:1"]})") ==
        "s.json: space.schedule[0]: interleaved:N needs N >= 2 (got \"interleaved:1\")");
  CHECK(error_of(R"({"schedule": ["interleaved:2"], "virtual_stages": [2]})") ==
        "s.json: space.schedule[0]: \"interleaved:N\" cannot be combined with a virtual_stages axis; "
        "list \"interleaved\" and the virtual stages separately");
  CHECK(error_of(R"({"schedule": ["interleaved", "interleaved:2"]})") ==
        "s.json: space.schedule[1]: duplicate value interleaved:2");
}

TEST_CASE("space: a plan with a space is a template, validated point by point") {
  // tp 5 breaks tp-divides-heads (12 heads), but the space replaces it.
  const auto s = gpt2(R"({"tp": [1, 2]})", R"({"tp": 4, "pp": 2})");
  REQUIRE(s.space);
  CHECK(testing::input_error_of([&] { require_valid_plan(s); }) == "no error");
  const auto bad = gpt2(R"({"zero": [0, 1]})", R"({"tp": 5, "dp": 1, "pp": 1})");
  CHECK(testing::input_error_of([&] { require_valid_plan(bad); }) ==
        "s.json: plan: dp·tp·pp·cp = 1·5·1·1 = 5 does not equal the cluster's 8 GPUs (1 nodes × 8)");
}

TEST_CASE("space: enumeration is a mixed-radix index, last axis fastest") {
  // 3 tp × 4 zero ("auto": 0–3) × 2 recompute = 24 plans, dp = 8 / tp.
  const auto s = gpt2(R"({"recompute": ["none", "full"], "zero": "auto", "tp": [1, 2, 4]})");
  const Space& sp = *s.space;
  CHECK(sp.size() == 24);
  REQUIRE(sp.axes.size() == 3);
  CHECK(sp.axes[0].axis == Axis::TP);  // canonical order, not the file's
  CHECK(sp.axes[1].axis == Axis::Zero);
  CHECK(sp.axes[2].axis == Axis::Recompute);
  CHECK(sp.derive_dp);
  std::set<std::uint64_t> ids;
  for (std::uint64_t i = 0; i < sp.size(); ++i) {
    Plan p = s.plan;
    Batch b = s.batch;
    sp.apply(i, p, b);
    CHECK(p.tp == std::int64_t{1} << (i / 8));
    CHECK(p.zero == static_cast<std::int64_t>((i / 2) % 4));
    CHECK(p.recompute == (i % 2 ? Recompute::Full : Recompute::None));
    CHECK(p.dp * p.tp == 8);
    ids.insert(plan_id(p, b));
  }
  CHECK(ids.size() == 24);  // every point is a different plan
}

TEST_CASE("space: listed dp is not derived; stage_layers are dropped when pp is searched") {
  const auto s = gpt2(R"({"dp": [1, 2], "tp": [4]})");
  CHECK_FALSE(s.space->derive_dp);
  const auto t = gpt2(R"({"pp": [1, 2]})", R"({"pp": 2, "dp": 4, "stage_layers": [5, 7]})");
  CHECK(t.space->balance_stages);
  Plan p = t.plan;
  Batch b = t.batch;
  t.space->apply(1, p, b);
  CHECK(p.pp == 2);
  CHECK(p.dp == 4);
  CHECK(p.stage_layers.empty());
}

TEST_CASE("space: schedules carry their virtual stages unless virtual_stages is an axis") {
  // Coupled: 1f1b sets v = 1; plain "interleaved" keeps the plan's 3.
  const auto s = gpt2(R"({"schedule": ["1f1b", "interleaved", "interleaved:4"]})",
                      R"({"pp": 2, "dp": 4, "schedule": "interleaved", "virtual_stages": 3})");
  CHECK(names(*s.space, Axis::Schedule) ==
        std::vector<std::string>{"1f1b", "interleaved:3", "interleaved:4"});
  Plan p = s.plan;
  Batch b = s.batch;
  s.space->apply(0, p, b);
  CHECK(p.virtual_stages == 1);
  // Uncoupled: the cartesian product, invalid pairs left to the rules.
  const auto u = gpt2(R"({"schedule": "auto", "virtual_stages": [1, 2]})");
  CHECK(u.space->size() == 3 * 2);
  CHECK(names(*u.space, Axis::Schedule) == std::vector<std::string>{"gpipe", "1f1b", "interleaved"});
}

TEST_CASE("space: \"auto\" for GPT-3 175B on 1024 A100-80GB (docs/explore.md)") {
  const auto s = load_scenario(STRATA_SOURCE_DIR "/configs/scenarios/gpt3-175b-explore.json");
  const Space& sp = *s.space;
  // tp: divisors of 96 heads up to 8 GPUs per node; pp: divisors of 1024 up
  // to 96 layers; schedule gpipe, 1f1b, interleaved with v = 2, 3, 4;
  // microbatch 1, 2, 4, 8 (each divides 1536).
  CHECK(names(sp, Axis::TP) == std::vector<std::string>{"1", "2", "3", "4", "6", "8"});
  CHECK(names(sp, Axis::PP) == std::vector<std::string>{"1", "2", "4", "8", "16", "32", "64"});
  CHECK(names(sp, Axis::CP) == std::vector<std::string>{"1"});
  CHECK(names(sp, Axis::EP) == std::vector<std::string>{"1"});
  CHECK(names(sp, Axis::Zero) == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(names(sp, Axis::Schedule) ==
        std::vector<std::string>{"gpipe", "1f1b", "interleaved:2", "interleaved:3", "interleaved:4"});
  CHECK(names(sp, Axis::Micro) == std::vector<std::string>{"1", "2", "4", "8"});
  CHECK(names(sp, Axis::SequenceParallel) == std::vector<std::string>{"false", "true"});
  CHECK(names(sp, Axis::Recompute) ==
        std::vector<std::string>{"none", "selective", "full", "optimal"});
  CHECK(names(sp, Axis::Offload) == std::vector<std::string>{"none", "activations", "optimizer"});
  CHECK(names(sp, Axis::OverlapGradReduce) == std::vector<std::string>{"false", "true"});
  CHECK(names(sp, Axis::OverlapP2p) == std::vector<std::string>{"false", "true"});
  CHECK(sp.find(Axis::OverlapParamGather) == nullptr);  // not modelled by the lowering yet
  CHECK(sp.axes.size() == 12);
  CHECK(sp.find(Axis::Optimizer) == nullptr);  // algorithmic: only when listed
  CHECK(sp.derive_dp);
  // 6 · 7 · 1 · 1 · 4 · 5 · 4 · 2 · 4 · 3 · 2 · 2
  CHECK(sp.size() == 322'560);
}

TEST_CASE("space: \"system\": \"auto\" opens the system axes beside listed ones") {
  const auto s = gpt2(R"({"system": "auto", "optimizer": ["adam", "adafactor"], "tp": [1, 2]})");
  CHECK(s.space->find(Axis::Optimizer)->values.size() == 2);
  CHECK(s.space->find(Axis::TP)->values.size() == 2);  // listed values win over "auto"
  CHECK(s.space->find(Axis::Zero)->values.size() == 4);
}

TEST_CASE("space: the composite offload axis sets all three offload keys") {
  const auto s = gpt2(R"({"offload": ["none", "activations", "weights", "optimizer"]})",
                      R"({"offload": {"activations": true, "optimizer": "nvme"}})");
  auto at = [&](std::uint64_t i) {
    Plan p = s.plan;
    Batch b = s.batch;
    s.space->apply(i, p, b);
    return p.offload;
  };
  CHECK((!at(0).activations && !at(0).weights && at(0).optimizer == OffloadTarget::None));
  CHECK((at(1).activations && !at(1).weights && at(1).optimizer == OffloadTarget::None));
  CHECK((!at(2).activations && at(2).weights && at(2).optimizer == OffloadTarget::None));
  CHECK((!at(3).activations && !at(3).weights && at(3).optimizer == OffloadTarget::Cpu));
  CHECK_FALSE(s.space->derive_dp);  // no degree is searched: dp stays the plan's
}

TEST_CASE("space: context parallelism's K/V exchange is an axis, listed or auto, never opened by \"space\": \"auto\"") {
  const auto s = gpt2(R"({"implementation.cp_comm": "auto"})", R"({"cp": 2, "dp": 4})");
  CHECK(names(*s.space, Axis::CpComm) == std::vector<std::string>{"p2p", "all_gather", "all_gather_ring"});
  CHECK_FALSE(is_system_axis(Axis::CpComm));
  for (std::uint64_t i = 0; i < 3; ++i) {
    Scenario pt = s;
    pt.space.reset();
    s.space->apply(i, pt.plan, pt.batch);
    CHECK(pt.plan.implementation.cp_comm == static_cast<CpComm>(i));
  }
  // A stack's setting does not override the searched value (implementation_axes).
  CHECK(implementation_axes(*s.space).has(ImplKey::CpComm));
}

TEST_CASE("space: the reduction dtype is an axis; a 16-bit one not the plan's is rejected by its rule") {
  // bf16 with fp32 accumulation: "auto" lists every value; each point
  // carries its own, and fp16 under bf16 fails grad-reduce-dtype.
  const auto s = gpt2(R"({"implementation.grad_reduce_dtype": "auto"})",
                      R"({"precision": "bf16", "implementation": {"fp32_grad_accumulation": true}})");
  CHECK(names(*s.space, Axis::GradReduceDtype) == std::vector<std::string>{"accumulation", "fp32", "bf16", "fp16"});
  CHECK_FALSE(is_system_axis(Axis::GradReduceDtype));  // not opened by "space": "auto"
  for (std::uint64_t i = 0; i < 4; ++i) {
    Scenario pt = s;
    pt.space.reset();
    s.space->apply(i, pt.plan, pt.batch);
    CHECK(pt.plan.implementation.grad_reduce_dtype == static_cast<GradReduceDtype>(i));
    const auto v = first_violation(pt);
    CHECK((v && v->rule == "grad-reduce-dtype") == (i == 3));
  }
  // Listed by name, as in a plan.
  CHECK(names(*gpt2(R"({"implementation.grad_reduce_dtype": ["bf16", "accumulation"]})",
                    R"({"precision": "bf16"})").space, Axis::GradReduceDtype) ==
        std::vector<std::string>{"bf16", "accumulation"});
}

TEST_CASE("space: \"auto\" expert parallelism for a MoE model") {
  // Mixtral 8x7B: 8 experts, so ep ∈ {1, 2, 4, 8}; 8 kv heads, 32 heads.
  const auto s = parse_scenario(R"({"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100", "nodes": 2},
      "batch": {"global": 256}, "plan": {"tp": 8}, "space": {"ep": "auto", "tp": "auto"}})", "m.json");
  CHECK(names(*s.space, Axis::EP) == std::vector<std::string>{"1", "2", "4", "8"});
  CHECK(names(*s.space, Axis::TP) == std::vector<std::string>{"1", "2", "4", "8"});
}

TEST_CASE("canonical JSON: sorted keys, read back as the same plan") {
  const auto s = gpt2(R"({"tp": [2]})",
                      R"({"tp": 2, "recompute": "every_k", "recompute_k": 3,
                          "compression": {"method": "qsgd", "bits": 4}, "zero": 1})");
  const std::string j = canonical_json(s.plan, s.batch);
  CHECK(j.rfind(R"({"batch":{"global":64,"micro":1},"plan":{"compression":{"bits":4,"method":"qsgd"},)", 0) == 0);
  CHECK(j.find("\"recompute_k\":3") != std::string::npos);
  // A scenario whose batch and plan are the canonical JSON has the same id.
  const std::string text = R"({"model": "gpt2-124m", "cluster": "dgx-h100", )" + j.substr(1);
  const auto back = parse_scenario(text, "back.json");
  CHECK(canonical_json(back.plan, back.batch) == j);
  CHECK(plan_id(back.plan, back.batch) == plan_id(s.plan, s.batch));
  CHECK(plan_id_hex(0x00ab) == "00000000000000ab");
  CHECK(parse_plan_id(plan_id_hex(plan_id(s.plan, s.batch))) == plan_id(s.plan, s.batch));
  CHECK_FALSE(parse_plan_id("12"));
  CHECK(fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cULL);  // FNV-1a 64 test vector
}

}  // namespace
}  // namespace strata::strategies
