#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sim/error.hpp"
#include "strategies/scenario.hpp"
#include "strategies/stack.hpp"

namespace strata::strategies {
namespace {

// GPT-3 1.3B on one DGX A100; `plan` and `extra` are spliced in.
Scenario with(const std::string& plan, const std::string& extra) {
  const std::string text = R"({"model": "gpt3-1.3b", "cluster": {"preset": "dgx-a100-80g", "nodes": 1},
    "batch": {"global": 64, "micro": 1}, "plan": {)" +
                           plan + "}" + extra + "}";
  return parse_scenario(text, "s.json");
}

std::string error_of(const std::string& plan, const std::string& extra) {
  try {
    with(plan, extra);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("a stack's settings replace Strata's defaults; the plan's own keys override them") {
  // Strata's defaults: flash attention, overlapped gradient reduction,
  // asynchronous TP gradient all-reduce, fused gradient accumulation.
  const Scenario plain = with(R"("dp": 4, "tp": 2, "precision": "fp16")", "");
  CHECK(plain.plan.implementation.attention == AttentionKernel::Flash);
  CHECK(plain.plan.implementation.overlap_grad_reduce);
  CHECK(!plain.stack);
  // Megatron-LM of 2021 had none of them (configs/stacks/megatron-lm-2021.json).
  const Scenario old = with(R"("dp": 4, "tp": 2, "precision": "fp16")", R"(, "stack": "megatron-lm-2021")");
  REQUIRE(old.stack);
  CHECK(old.stack->name == "megatron-lm-2021");
  CHECK(old.plan.implementation.attention == AttentionKernel::Standard);
  CHECK(!old.plan.implementation.overlap_grad_reduce);
  CHECK(!old.plan.implementation.tp_grad_overlap);
  CHECK(!old.plan.implementation.grad_accumulation_fusion);
  CHECK(old.plan.implementation.pp_scatter_gather);
  // One key given by the scenario wins; the others stay the stack's.
  const Scenario mixed = with(R"("dp": 4, "tp": 2, "precision": "fp16",
                                 "implementation": {"overlap_grad_reduce": true})",
                              R"(, "stack": "megatron-lm-2021")");
  CHECK(mixed.plan.implementation.overlap_grad_reduce);
  CHECK(mixed.plan.implementation.attention == AttentionKernel::Standard);
  CHECK(mixed.implementation_keys.has(ImplKey::OverlapGradReduce));
  CHECK(!mixed.implementation_keys.has(ImplKey::Attention));
}

TEST_CASE("a setting that depends on the plan follows it") {
  // DeepSpeed overlaps gradient reduction by default only under ZeRO-3
  // (overlap_comm defaults to stage == 3).
  CHECK(with(R"("dp": 8, "zero": 3)", R"(, "stack": "deepspeed")").plan.implementation.overlap_grad_reduce);
  CHECK(!with(R"("dp": 8, "zero": 2)", R"(, "stack": "deepspeed")").plan.implementation.overlap_grad_reduce);
  // Megatron-LM accumulates gradients in fp32 under bf16 only.
  CHECK(with(R"("dp": 8, "precision": "bf16")", R"(, "stack": "megatron-core-0.7")")
            .plan.implementation.fp32_grad_accumulation);
  CHECK(!with(R"("dp": 8, "precision": "fp16")", R"(, "stack": "megatron-core-0.7")")
             .plan.implementation.fp32_grad_accumulation);
}

TEST_CASE("an explored point resolves the stack for its own plan; the space's implementation axes win") {
  const Scenario sc = with(R"("dp": 8, "zero": 3)", R"(, "stack": "deepspeed",
      "space": {"zero": [1, 3], "implementation.attention": ["standard", "flash"]})");
  REQUIRE(sc.space);
  Space space = *sc.space;
  space.gpus = sc.cluster.gpus();
  int zero1 = 0, zero3 = 0;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    Plan p;
    Batch b;
    space_point(sc, space, i, p, b);
    // The template's ZeRO-3 overlap must not leak into ZeRO-1 points.
    CHECK(p.implementation.overlap_grad_reduce == (p.zero == 3));
    (p.zero == 3 ? zero3 : zero1) += 1;
  }
  CHECK(zero1 == 2);
  CHECK(zero3 == 2);
  CHECK(implementation_axes(space).has(ImplKey::Attention));
  CHECK(!implementation_axes(space).has(ImplKey::OverlapGradReduce));
}

TEST_CASE("every bundled stack reads, and every setting says where the framework sets it") {
  const auto names = stack_names();
  CHECK(names.size() >= 6);
  for (const auto& n : names) {
    CAPTURE(n);
    const Stack s = bundled_stack(n);
    CHECK(!s.description.empty());
    CHECK(!s.settings.empty());
    for (const auto& st : s.settings) CHECK(!st.source.empty());
  }
}

TEST_CASE("bad stacks are refused with the file, the JSON path and the rule") {
  CHECK(error_of(R"("dp": 8)", R"(, "stack": "megatron-9")").find("unknown stack preset \"megatron-9\"") !=
        std::string::npos);
  const auto dir = std::filesystem::temp_directory_path() / "strata_stack_test";
  std::filesystem::create_directories(dir);
  auto file = [&](const char* name, const char* text) {
    const auto p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  };
  const std::string unsourced = file("unsourced.json", R"({"description": "x",
      "settings": {"attention": {"value": "standard"}}})");
  CHECK(error_of(R"("dp": 8)", ", \"stack\": \"" + unsourced + "\"").find("settings.attention") !=
        std::string::npos);
  const std::string unknown = file("unknown.json", R"({"description": "x",
      "settings": {"warp_speed": {"value": true, "source": "s"}}})");
  CHECK(error_of(R"("dp": 8)", ", \"stack\": \"" + unknown + "\"").find("is not a stack setting") !=
        std::string::npos);
  // A conditional setting needs a value for the plans no case names.
  const std::string partial = file("partial.json", R"({"description": "x",
      "settings": {"overlap_grad_reduce": {"by": "zero", "cases": {"3": true}, "source": "s"}}})");
  CHECK(error_of(R"("dp": 8)", ", \"stack\": \"" + partial + "\"").find("otherwise") != std::string::npos);
  const std::string bad_case = file("bad_case.json", R"({"description": "x",
      "settings": {"overlap_grad_reduce": {"by": "zero", "cases": {"4": true}, "otherwise": false,
                                           "source": "s"}}})");
  CHECK(error_of(R"("dp": 8)", ", \"stack\": \"" + bad_case + "\"").find("is not a ZeRO stage") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::strategies
