#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sim/error.hpp"
#include "explorer/explore.hpp"
#include "strategies/scenario.hpp"
#include "strategies/stack.hpp"
#include "strategies/validate.hpp"

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

TEST_CASE("llm-foundry: FSDP keeps fp32 gradient shards and reduces in Composer's DEFAULT fp32 (PURE overrides in bf16); FSDP1 flat gradients, FSDP2 copy-out") {
  const Scenario dflt = with(R"("dp": 8, "zero": 3, "precision": "bf16")", R"(, "stack": "llm-foundry")");
  CHECK(dflt.plan.implementation.fp32_grad_accumulation);
  CHECK(dflt.plan.implementation.grad_reduce_dtype == GradReduceDtype::FP32);
  CHECK(implementation_text(ImplKey::GradReduceDtype,
                            implementation_value(dflt.plan.implementation, ImplKey::GradReduceDtype)) == "fp32");
  const Scenario pure = with(R"("dp": 8, "zero": 3, "precision": "bf16", "implementation": {"grad_reduce_dtype": "bf16"})",
                             R"(, "stack": "llm-foundry")");
  CHECK(pure.plan.implementation.fp32_grad_accumulation);
  CHECK(pure.plan.implementation.grad_reduce_dtype == GradReduceDtype::BF16);
  // How each FSDP lays out its gathers and gradients: FSDP1's flat
  // parameters (llm-foundry), FSDP2's copy-out of each gather (torchtitan).
  CHECK(dflt.plan.implementation.zero3_flat_grads);
  CHECK_FALSE(dflt.plan.implementation.zero3_gather_copy_out);
  const Scenario titan = with(R"("dp": 8, "zero": 3, "precision": "bf16")", R"(, "stack": "torchtitan")");
  CHECK(titan.plan.implementation.zero3_gather_copy_out);
  CHECK_FALSE(titan.plan.implementation.zero3_flat_grads);
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
  // Eager PyTorch: 5 µs of host time per kernel, as text "5 us".
  CHECK(old.plan.implementation.host_dispatch_us == 5);
  CHECK(plain.plan.implementation.host_dispatch_us == 0);
  const Scenario graphs = with(R"("dp": 4, "tp": 2, "precision": "fp16", "implementation": {"host_dispatch_us": 0.5})",
                               R"(, "stack": "megatron-lm-2021")");
  CHECK(graphs.plan.implementation.host_dispatch_us == 0.5);
  CHECK(implementation_text(ImplKey::HostDispatch,
                            implementation_value(old.plan.implementation, ImplKey::HostDispatch)) == "5 us");
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
  // torchtitan runs its loss under loss_parallel whenever tp > 1
  // (ParallelDims.loss_parallel_enabled), plain F.cross_entropy otherwise.
  CHECK(with(R"("dp": 4, "tp": 2, "sequence_parallel": true, "zero": 3)", R"(, "stack": "torchtitan")")
            .plan.implementation.cross_entropy == CrossEntropy::Parallel);
  CHECK(with(R"("dp": 8, "zero": 3)", R"(, "stack": "torchtitan")").plan.implementation.cross_entropy ==
        CrossEntropy::Unfused);
  // The plan's own key wins.
  CHECK(with(R"("dp": 4, "tp": 2, "sequence_parallel": true, "zero": 3,
                "implementation": {"cross_entropy": "unfused"})",
             R"(, "stack": "torchtitan")")
            .plan.implementation.cross_entropy == CrossEntropy::Unfused);
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

TEST_CASE("a setting acts only where its parallelism runs") {
  // Context parallelism's algorithm needs cp > 1; tensor parallelism's
  // backward overlap tp > 1, and what its linears keep sequence
  // parallelism too; other settings are taken to act.
  Plan p;
  CHECK_FALSE(implementation_acts(ImplKey::CpComm, p));
  CHECK_FALSE(implementation_acts(ImplKey::TpGradOverlap, p));
  CHECK_FALSE(implementation_acts(ImplKey::SpRegatherInput, p));
  CHECK(implementation_acts(ImplKey::FusedElementwise, p));
  p.cp = 2;
  p.tp = 2;
  CHECK(implementation_acts(ImplKey::CpComm, p));
  CHECK(implementation_acts(ImplKey::TpGradOverlap, p));
  CHECK_FALSE(implementation_acts(ImplKey::SpRegatherInput, p));
  p.sequence_parallel = true;
  CHECK(implementation_acts(ImplKey::SpRegatherInput, p));
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
    for (const auto& c : s.capabilities) {
      CHECK(!c.when.empty());
      CHECK(!c.message.empty());
      CHECK(!c.source.empty());
    }
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
  const std::string bad_tp = file("bad_tp.json", R"({"description": "x",
      "settings": {"cross_entropy": {"by": "tensor_parallel", "cases": {"2": "parallel"}, "otherwise": "unfused",
                                     "source": "s"}}})");
  CHECK(error_of(R"("dp": 8)", ", \"stack\": \"" + bad_tp + "\"").find("whether the plan's tp is above 1") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}


TEST_CASE("a stack's capabilities refuse the plans its engine cannot launch, naming the rule") {
  // DeepSpeed's pipeline engine asserts ZeRO stage < 2 (configs/stacks/deepspeed.json).
  CHECK(error_of(R"("dp": 2, "pp": 4, "zero": 2)", R"(, "stack": "deepspeed")") ==
        "s.json: plan.zero: deepspeed cannot launch this plan (sharded-grads-with-pp: zero 2|3, "
        "pp >= 2): DeepSpeed's pipeline engine runs with ZeRO stage 0 or 1 only");
  CHECK_NOTHROW(with(R"("dp": 2, "pp": 4, "zero": 1)", R"(, "stack": "deepspeed")"));
  CHECK_NOTHROW(with(R"("dp": 8, "zero": 3)", R"(, "stack": "deepspeed")"));
  // Megatron-Core 0.7 has no sharded gradients at all; the 2025 Megatron-LM
  // has them in Megatron-FSDP, without pipeline parallelism.
  CHECK(error_of(R"("dp": 8, "zero": 2)", R"(, "stack": "megatron-core-0.7")").find(
            "(sharded-grads: zero 2|3)") != std::string::npos);
  CHECK_NOTHROW(with(R"("dp": 8, "zero": 2)", R"(, "stack": "megatron-lm-2025")"));
  CHECK(error_of(R"("dp": 4, "pp": 2, "zero": 2)", R"(, "stack": "megatron-lm-2025")").find(
            "megatron-lm-2025 cannot launch this plan (sharded-grads-with-pp") != std::string::npos);
  CHECK(error_of(R"("dp": 4, "pp": 2, "offload": {"activations": true})", R"(, "stack": "megatron-lm-2025")")
            .find("activation-offload-with-pp") != std::string::npos);
  CHECK(error_of(R"("dp": 8, "recompute": "full", "offload": {"activations": true})",
                 R"(, "stack": "megatron-lm-2025")")
            .find("activation-offload-with-recompute") != std::string::npos);
  CHECK_NOTHROW(with(R"("dp": 8, "offload": {"activations": true})", R"(, "stack": "megatron-lm-2025")"));
  CHECK(error_of(R"("dp": 8, "zero": 2, "offload": {"activations": true})", R"(, "stack": "torchtitan")")
            .find("torchtitan cannot launch this plan (activation-offload: offload.activations true)") !=
        std::string::npos);
  CHECK(error_of(R"("dp": 4, "tp": 2, "zero": 2)", R"(, "stack": "torchtitan")")
            .find("tp-without-sequence-parallel") != std::string::npos);
  // Megatron-Core's recompute_modules: in the 2025 release, not before it,
  // and not in the other engines.
  const std::string mods = R"("dp": 8, "recompute": "selective", "recompute_modules": ["core_attn", "layernorm"])";
  CHECK_NOTHROW(with(mods, R"(, "stack": "megatron-lm-2025")"));
  for (const char* stack : {"megatron-core-0.7", "megatron-lm-2022", "nemo-24.07", "deepspeed", "torchtitan"})
    CHECK(error_of(mods, std::string(R"(, "stack": ")") + stack + "\"")
              .find(std::string(stack) + " cannot launch this plan (recompute-modules: recompute_modules true)") !=
          std::string::npos);
  // bf16 optimizer statistics: Megatron-Core's precision-aware optimizer.
  const std::string states = R"("dp": 8, "optimizer": "adamw", "optimizer_states": "bf16")";
  CHECK_NOTHROW(with(states, R"(, "stack": "megatron-lm-2025")"));
  for (const char* stack : {"megatron-core-0.7", "nemo-24.07", "deepspeed", "torchtitan", "llm-foundry"})
    CHECK(error_of(states, std::string(R"(, "stack": ")") + stack + "\"")
              .find(std::string(stack) + " cannot launch this plan (optimizer-states-bf16: optimizer_states bf16)") !=
          std::string::npos);
  // Without a stack no engine is named: every valid plan is accepted.
  CHECK_NOTHROW(with(R"("dp": 2, "pp": 4, "zero": 2, "offload": {"activations": true})", ""));
}

TEST_CASE("launch_violation: the first rule whose fields all match") {
  const Stack ds = bundled_stack("deepspeed");
  Plan p;
  p.dp = 2;
  p.pp = 4;
  p.zero = 2;
  const auto v = launch_violation(ds, p);
  REQUIRE(v);
  CHECK(v->rule == "deepspeed/sharded-grads-with-pp");
  CHECK(v->path == "plan.zero");
  p.pp = 1;  // one field of the rule no longer matches
  CHECK(!launch_violation(ds, p));
  p.schedule = Schedule::Interleaved;
  p.pp = 2;
  p.zero = 1;
  p.virtual_stages = 2;
  CHECK(launch_violation(ds, p)->rule == "deepspeed/schedule-interleaved");
}

TEST_CASE("explore with a stack searches only the plans it can launch, counting the rest per rule") {
  // 4 ZeRO stages × pp 1, 2 on 8 GPUs: under DeepSpeed ZeRO-2 and ZeRO-3
  // with pp 2 are refused (2 plans); 6 remain. Without the stack all 8 are scored.
  const std::string text = R"({"model": "gpt3-1.3b", "cluster": {"preset": "dgx-a100-80g", "nodes": 1},
    "batch": {"global": 64, "micro": 1}, "plan": {"optimizer": "adamw"},
    "space": {"zero": [0, 1, 2, 3], "pp": [1, 2]})";
  ExploreOptions o;
  o.scorer = [](const Scenario& sc) {
    Score s;
    s.step.step_time = 1'000'000 + sc.plan.zero;
    return s;
  };
  const auto any = explore(parse_scenario(text + "}", "s.json"), o);
  CHECK(any.invalid == 0);
  CHECK(any.scored == 8);
  const auto ds = explore(parse_scenario(text + R"(, "stack": "deepspeed"})", "s.json"), o);
  CHECK(ds.invalid == 2);
  CHECK(ds.scored == 6);
  CHECK(ds.rejected.at("deepspeed/sharded-grads-with-pp").count == 2);
}

TEST_CASE("bad capability rules are refused with the file, the JSON path and the rule") {
  const auto dir = std::filesystem::temp_directory_path() / "strata_capability_test";
  std::filesystem::create_directories(dir);
  auto error_with = [&](const char* caps) {
    const auto p = dir / "caps.json";
    std::ofstream(p) << R"({"description": "x", "settings": {}, "capabilities": )" << caps << "}";
    return error_of(R"("dp": 8)", ", \"stack\": \"" + p.string() + "\"");
  };
  CHECK(error_with(R"([{"rule": "r", "when": {"zer": 2}, "message": "m", "source": "s"}])")
            .find("capabilities[0].when.zer: is not a plan field a rule can match") != std::string::npos);
  // An empty condition would refuse every plan.
  CHECK(error_with(R"([{"rule": "r", "when": {}, "message": "m", "source": "s"}])")
            .find("capabilities[0].when: needs at least one field") != std::string::npos);
  CHECK(error_with(R"([{"rule": "r", "when": {"zero": 2}, "message": "m"}])")
            .find("capabilities[0].source: missing required key") != std::string::npos);
  CHECK(error_with(R"([{"rule": "r", "when": {"schedule": "zigzag"}, "message": "m", "source": "s"}])")
            .find("capabilities[0].when.schedule: must be one of") != std::string::npos);
  CHECK(error_with(R"([{"rule": "r", "when": {"zero": 2}, "message": "m", "source": "s"},
                       {"rule": "r", "when": {"zero": 3}, "message": "m", "source": "s"}])")
            .find("capabilities[1].rule: \"r\" is given twice") != std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::strategies
