// Per-GPU memory: published numbers (../shared/validation/published_cases.json,
// quoted here with their sources), closed forms for every plan axis, and
// agreement between the analytical model and the replayed timeline.
#include "lowering/memory.hpp"

#include <doctest/doctest.h>

#include <cmath>

#include "lowering/memory_lowering.hpp"
#include "lowering/step_costs.hpp"
#include "sim/engine.hpp"
#include "lowering/schedule.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {
namespace {

using sim::MemTag;

Bytes tag(const StageMemory& st, MemTag t) { return st.bytes[static_cast<std::size_t>(t)]; }
double model_states(const StageMemory& st) {
  return static_cast<double>(tag(st, MemTag::Params) + tag(st, MemTag::Grads) +
                             tag(st, MemTag::OptimizerStates));
}

// A scenario from JSON text, with `plan` and `batch` spliced in.
Scenario make(const std::string& model, const std::string& cluster, const std::string& batch,
              const std::string& plan) {
  return parse_scenario("{\"model\": " + model + ", \"cluster\": " + cluster +
                            ", \"batch\": " + batch + ", \"plan\": " + plan + "}",
                        "test.json");
}

std::string gpt(int layers, int hidden, int heads, int seq = 2048, int vocab = 51200) {
  return "{\"layers\": " + std::to_string(layers) + ", \"hidden\": " + std::to_string(hidden) +
         ", \"heads\": " + std::to_string(heads) + ", \"seq_len\": " + std::to_string(seq) +
         ", \"vocab\": " + std::to_string(vocab) + "}";
}

TEST_CASE("FP8 recipes: the blocks' weights kept in FP8 for the step, the saved inputs with their scales") {
  // One DGX node, dp 8, ZeRO-1: under fp8 every block GEMM's weight is kept
  // in FP8 beside the bf16 one: a byte per weight (delayed), two with an
  // E8M0 byte per 32 each (mxfp8: row-wise and column-wise copies); none
  // under ZeRO-3. A Linear op's saved input gains the recipe's scales
  // (blockwise: an fp32 per 128 elements).
  const std::string model = gpt(4, 1024, 16), batch = R"({"global": 8, "micro": 1})";
  auto on = [&](const std::string& gpu, const std::string& plan) {
    return make(model, "{\"gpu\": {\"preset\": \"" + gpu + "\"}, \"nodes\": 1}", batch, plan);
  };
  const Scenario bf16 = on("b200", R"({"dp": 8, "zero": 1})");
  const Scenario delayed = on("b200", R"({"dp": 8, "zero": 1, "precision": "fp8"})");
  const Scenario mx = on("b200", R"({"dp": 8, "zero": 1, "precision": "fp8", "fp8_recipe": "mxfp8"})");
  const cost::OpChain chain = cost::expand(delayed.model, expand_options(delayed));
  double matrices = 0;
  for (const auto& op : chain.main_block().ops)
    if (op.kind == cost::OpKind::Linear) matrices += static_cast<double>(op.matrix_params());
  matrices *= 4;  // layers
  CHECK(matrices > 0);
  const auto params = [](const Scenario& sc) {
    return static_cast<double>(tag(estimate_memory(sc).stages[0], MemTag::Params));
  };
  CHECK(params(delayed) - params(bf16) == doctest::Approx(matrices).epsilon(1e-9));
  CHECK(params(mx) - params(bf16) == doctest::Approx(2 * (1 + 1.0 / 32) * matrices).epsilon(1e-9));
  // torchao's rowwise keeps no FP8 weights (it casts them in every pass).
  const Scenario rows = on("b200", R"({"dp": 8, "zero": 1, "precision": "fp8", "fp8_recipe": "rowwise"})");
  CHECK(params(rows) == params(bf16));
  const Scenario z3 = on("b200", R"({"dp": 8, "zero": 3, "precision": "fp8"})");
  const Scenario z3_bf16 = on("b200", R"({"dp": 8, "zero": 3})");
  CHECK(params(z3) == params(z3_bf16));
  // Saved inputs: blockwise against delayed, on a Hopper node.
  const Scenario per_tensor = on("h100-sxm", R"({"dp": 8, "precision": "fp8"})");
  const Scenario block = on("h100-sxm", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "blockwise"})");
  // torchao's rowwise saves the 16-bit input: twice the per-tensor bytes.
  const Scenario row = on("h100-sxm", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "rowwise"})");
  const cost::OpChain a = cost::expand(per_tensor.model, expand_options(per_tensor));
  const cost::OpChain b = cost::expand(block.model, expand_options(block));
  const cost::OpChain r = cost::expand(row.model, expand_options(row));
  for (std::size_t i = 0; i < a.main_block().ops.size(); ++i) {
    const auto& x = a.main_block().ops[i];
    const auto& y = b.main_block().ops[i];
    const auto& z = r.main_block().ops[i];
    CAPTURE(x.name);
    if (x.kind == cost::OpKind::Linear) {
      CHECK(static_cast<double>(y.saved_bytes - x.saved_bytes) ==
            doctest::Approx(static_cast<double>(x.saved_bytes) * 4.0 / 128).epsilon(1e-6));
      CHECK(z.saved_bytes == 2 * x.saved_bytes);
    } else {
      CHECK(y.saved_bytes == x.saved_bytes);
      CHECK(z.saved_bytes == x.saved_bytes);
    }
  }
}

TEST_CASE("FP4 (NVFP4): weights kept both ways at 4 bits with E4M3 scales, saved inputs likewise") {
  // dp 8 on a B200 node, ZeRO-1: each block GEMM's weight is kept for the
  // step in its row-wise and column-wise NVFP4 copies, 2 · (0.5 + 1/16) =
  // 1.125 bytes per weight beside the bf16 one (none under ZeRO-3). A
  // Linear op saves its input's column-wise copy: 0.5 + 1/16 bytes an
  // element against bf16's 2; every other op saves what bf16 saves.
  const std::string model = gpt(4, 1024, 16), batch = R"({"global": 8, "micro": 1})";
  auto on = [&](const std::string& plan) {
    return make(model, R"({"gpu": {"preset": "b200"}, "nodes": 1})", batch, plan);
  };
  const Scenario bf16 = on(R"({"dp": 8, "zero": 1})");
  const Scenario fp4 = on(R"({"dp": 8, "zero": 1, "precision": "fp4"})");
  const cost::OpChain a = cost::expand(bf16.model, expand_options(bf16));
  const cost::OpChain b = cost::expand(fp4.model, expand_options(fp4));
  double matrices = 0;
  for (std::size_t i = 0; i < a.main_block().ops.size(); ++i) {
    const auto& x = a.main_block().ops[i];
    const auto& y = b.main_block().ops[i];
    CAPTURE(x.name);
    if (x.kind == cost::OpKind::Linear) {
      matrices += static_cast<double>(y.matrix_params());
      CHECK(static_cast<double>(y.saved_bytes) ==
            doctest::Approx(static_cast<double>(x.saved_bytes) / 2 * (0.5 + 1.0 / 16)).epsilon(1e-6));
    } else {
      CHECK(y.saved_bytes == x.saved_bytes);
    }
  }
  matrices *= 4;  // layers
  CHECK(matrices > 0);
  const auto params = [](const Scenario& sc) {
    return static_cast<double>(tag(estimate_memory(sc).stages[0], MemTag::Params));
  };
  CHECK(params(fp4) - params(bf16) == doctest::Approx(1.125 * matrices).epsilon(1e-9));
  CHECK(params(on(R"({"dp": 8, "zero": 3, "precision": "fp4"})")) == params(on(R"({"dp": 8, "zero": 3})")));
  // The first and last blocks kept in bf16: their weights are not quantized
  // (two of four layers: half the FP4 copies), their Linear ops save 16-bit
  // inputs.
  const Scenario ends = on(R"({"dp": 8, "zero": 1, "precision": "fp4", "bf16_layers": {"first": 1, "last": 1}})");
  CHECK(params(ends) - params(bf16) == doctest::Approx(1.125 * matrices / 2).epsilon(1e-9));
  CHECK(tag(estimate_memory(ends).stages[0], MemTag::Activations) >
        tag(estimate_memory(fp4).stages[0], MemTag::Activations));
  // The replayed step holds what the analytical model counts.
  const auto est = estimate_memory(fp4);
  const auto replay = simulate_memory(fp4);
  CHECK(replay.source == "timeline");
  CHECK(replay.peak_bytes == est.peak_bytes);
  CHECK(tag(replay.stages[0], MemTag::Activations) == tag(est.stages[0], MemTag::Activations));
}

TEST_CASE("FP8 recipes are refused where they cannot run, naming the rule") {
  const std::string model = gpt(4, 1024, 16), batch = R"({"global": 8, "micro": 1})";
  // The scenario is refused as it is read (parse_scenario checks its plan).
  auto rule = [&](const std::string& gpu, const std::string& plan) -> std::string {
    try {
      (void)make(model, "{\"gpu\": {\"preset\": \"" + gpu + "\"}, \"nodes\": 1}", batch, plan);
      return "none";
    } catch (const InputError& e) {
      return e.what();
    }
  };
  CHECK(rule("h100-sxm", R"({"dp": 8, "fp8_recipe": "tensorwise"})") ==
        "test.json: plan.fp8_recipe: the tensorwise recipe scales FP8 operands; precision is bf16 "
        "(set precision \"fp8\", or leave fp8_recipe out)");
  CHECK(rule("h100-sxm", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "mxfp8"})") ==
        "test.json: plan.fp8_recipe: mxfp8 needs tensor cores that read block scales (Blackwell); "
        "h100-sxm's fp8_block_scaling is \"emulated\"");
  CHECK(rule("h100-sxm", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "blockwise"})") == "none");
  CHECK(rule("b200", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "mxfp8"})") == "none");
  // Per-tensor scaling needs FP8 tensor cores only: a GPU without row- or
  // block-scaled GEMMs runs it; not rowwise.
  CHECK(rule("mi300x", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "tensorwise"})") == "none");
  // FP8 parameters: with the distributed optimizer (zero 1-2) and an FP8 recipe of Transformer Engine.
  CHECK(rule("h100-sxm", R"({"dp": 8, "zero": 1, "precision": "fp8", "implementation": {"fp8_param_gather": true}})") ==
        "none");
  CHECK(rule("h100-sxm", R"({"dp": 8, "zero": 3, "precision": "fp8", "implementation": {"fp8_param_gather": true}})")
            .rfind("test.json: plan.implementation.fp8_param_gather: FP8 parameters gathered by the distributed "
                   "optimizer need precision fp8",
                   0) == 0);
  // FP4 needs an FP4 peak (Blackwell); an FP8 recipe does not apply to it.
  CHECK(rule("h100-sxm", R"({"dp": 8, "precision": "fp4"})") ==
        "test.json: plan.precision: fp4 is not supported by h100-sxm (no fp4 peak)");
  CHECK(rule("b200", R"({"dp": 8, "precision": "fp4"})") == "none");
  CHECK(rule("b200", R"({"dp": 8, "precision": "fp4", "fp8_recipe": "mxfp8"})") ==
        "test.json: plan.fp8_recipe: the mxfp8 recipe scales FP8 operands; precision is fp4 "
        "(set precision \"fp8\", or leave fp8_recipe out)");
  CHECK(rule("b200", R"({"dp": 8, "zero": 1, "precision": "fp4", "implementation": {"fp8_param_gather": true}})")
            .rfind("test.json: plan.implementation.fp8_param_gather:", 0) == 0);
  // Blocks kept in bf16: only under fp8 or fp4, at most the model's layers.
  CHECK(rule("b200", R"({"dp": 8, "bf16_layers": {"first": 1}})") ==
        "test.json: plan.bf16_layers: blocks kept in bf16 are the exception to fp8 or fp4 training; precision is "
        "bf16 (set precision \"fp8\" or \"fp4\", or leave bf16_layers out)");
  CHECK(rule("b200", R"({"dp": 8, "precision": "fp8", "bf16_layers": {"first": 3, "last": 2}})") ==
        "test.json: plan.bf16_layers: first 3 + last 2 exceed the model's 4 layers");
  CHECK(rule("b200", R"({"dp": 8, "precision": "fp8", "bf16_layers": {"first": 2, "last": 2}})") == "none");
  CHECK(rule("mi300x", R"({"dp": 8, "precision": "fp8", "fp8_recipe": "rowwise"})") ==
        "test.json: plan.fp8_recipe: rowwise needs row- or block-scaled FP8 GEMMs (Hopper, emulated by cuBLAS 12.9+, "
        "or Blackwell); mi300x's fp8_block_scaling is \"none\"");
}

TEST_CASE("selective recompute under flash attention is named as no recompute") {
  // Flash attention saves no attention scores: selective recompute keeps
  // what none keeps and reruns nothing, in memory and in step time, and
  // plan_notes says so; with standard attention it drops the core (no note).
  const std::string cluster = "\"dgx-h100\"", batch = R"({"global": 8, "micro": 1})";
  auto plan = [](const char* recompute, const char* attention) {
    return std::string(R"({"dp": 8, "recompute": ")") + recompute + R"(", "implementation": {"attention": ")" +
           attention + "\"}}";
  };
  const Scenario flash = make(gpt(4, 1024, 16), cluster, batch, plan("selective", "flash"));
  const Scenario flash_none = make(gpt(4, 1024, 16), cluster, batch, plan("none", "flash"));
  const Scenario standard = make(gpt(4, 1024, 16), cluster, batch, plan("selective", "standard"));
  REQUIRE(plan_notes(flash).size() == 1);
  CHECK(plan_notes(flash)[0].find("\"selective\" is \"none\"") != std::string::npos);
  CHECK(plan_notes(flash_none).empty());
  CHECK(plan_notes(standard).empty());
  CHECK(estimate_memory(flash).peak_bytes == estimate_memory(flash_none).peak_bytes);
  CHECK(estimate_memory(standard).peak_bytes < estimate_memory(make(gpt(4, 1024, 16), cluster, batch,
                                                                    plan("none", "standard")))
                                                   .peak_bytes);
  const ModelStepCosts costs(flash), costs_none(flash_none);
  CHECK(predict_step(flash, costs).step_time == predict_step(flash_none, costs_none).step_time);
}

TEST_CASE("ZeRO Table 1: model states per device for stages 0-3") {
  // ZERO Table 1 (Nd = 64, mixed-precision Adam, K = 12): 7.5B → 120 / 31.4 /
  // 16.6 / 1.88 GB; 128B → 2048 / 536 / 284 / 32 GB; 1T → 16000 / 4187 /
  // 2218 / 250 GB (decimal GB, as the paper rounds them).
  const PerParam adam = bytes_per_param(Optimizer::Adam, Precision::FP16);
  CHECK(adam.total() == 16);
  struct Row {
    double psi;
    double gb[4];
  };
  for (const Row& r : {Row{7.5e9, {120, 31.4, 16.6, 1.88}}, Row{128e9, {2048, 536, 284, 32}},
                       Row{1e12, {16000, 4187, 2218, 250}}}) {
    for (int z = 0; z < 4; ++z) {
      CAPTURE(r.psi);
      CAPTURE(z);
      CHECK(zero_model_states(r.psi, adam, z, 64).total() / 1e9 ==
            doctest::Approx(r.gb[z]).epsilon(0.003));
    }
  }
}

TEST_CASE("ZeRO stages on a whole scenario shard by the model's own parameter count") {
  // A 7.5B-class GPT on 64 GPUs: model states are 16Ψ, 4Ψ + 12Ψ/64,
  // 2Ψ + 14Ψ/64 and 16Ψ/64 of its own Ψ.
  const std::string model = gpt(36, 4096, 32);
  double psi = 0;
  const double want[4] = {16, 4 + 12.0 / 64, 2 + 14.0 / 64, 16.0 / 64};
  for (int z = 0; z < 4; ++z) {
    const auto sc = make(model, "{\"preset\": \"dgx-a100-80g\", \"nodes\": 8}",
                         "{\"global\": 64}", "{\"zero\": " + std::to_string(z) + "}");
    const auto est = estimate_memory(sc);
    psi = static_cast<double>(est.stages[0].params);
    CHECK(model_states(est.stages[0]) == doctest::Approx(want[z] * psi).epsilon(1e-9));
  }
  CHECK(psi == doctest::Approx(7.5e9).epsilon(0.05));
}

TEST_CASE("ZeRO shards over dp x cp: cp 8 at dp 1 shards as dp 8 does") {
  // Gradients are reduced over dp · cp, and Megatron-LM's distributed
  // optimizer and torchtitan's FSDP shard over that group: 8 GPUs, dp 1,
  // cp 8 keep 16Ψ/8 of model states under ZeRO-3 (2 + 14/8 Ψ under ZeRO-2,
  // 4 + 12/8 Ψ under ZeRO-1), as dp 8 does; ZeRO-0 keeps 16Ψ either way.
  const std::string model = gpt(24, 2048, 16, 8192);
  const double want[4] = {16, 4 + 12.0 / 8, 2 + 14.0 / 8, 16.0 / 8};
  for (int z = 0; z < 4; ++z) {
    CAPTURE(z);
    const std::string zero = "\"zero\": " + std::to_string(z);
    const auto cp = estimate_memory(make(model, "\"dgx-a100-80g\"", "{\"global\": 8}", "{\"cp\": 8, \"dp\": 1, " + zero + "}"));
    const auto dp = estimate_memory(make(model, "\"dgx-a100-80g\"", "{\"global\": 8}", "{\"dp\": 8, " + zero + "}"));
    const double psi = static_cast<double>(cp.stages[0].params);
    CHECK(model_states(cp.stages[0]) == doctest::Approx(want[z] * psi).epsilon(1e-9));
    CHECK(model_states(cp.stages[0]) == doctest::Approx(model_states(dp.stages[0])).epsilon(1e-12));
  }
}

TEST_CASE("optimizer state bytes per parameter") {
  // Mixed precision adds a 4-byte fp32 master copy to each optimizer's state.
  auto k = [](Optimizer o, Precision p = Precision::BF16) { return bytes_per_param(o, p).optimizer; };
  CHECK(k(Optimizer::Sgd) == 4);
  CHECK(k(Optimizer::Sgd, Precision::FP32) == 0);
  CHECK(k(Optimizer::Momentum) == 8);
  CHECK(k(Optimizer::Lars) == 8);
  CHECK(k(Optimizer::Adam) == 12);
  CHECK(k(Optimizer::AdamW) == 12);
  CHECK(k(Optimizer::Lamb) == 12);
  CHECK(k(Optimizer::Adam, Precision::FP32) == 8);
  // 8-bit Adam (DETTMERS): 32-bit Adam's 8 bytes of state become 2, plus one
  // fp32 absmax per 2048-entry block and moment: saves 6 of 8 bytes.
  CHECK(k(Optimizer::Adam, Precision::FP32) - k(Optimizer::Adam8bit, Precision::FP32) ==
        doctest::Approx(6 - 8.0 / 2048));
  CHECK(k(Optimizer::Adam4bit, Precision::FP32) == doctest::Approx(1 + 8.0 / 128));
  // fp32 gradient accumulation: fp16 keeps 2 + 4 bytes of gradient (20 bytes
  // per parameter in all), bf16 4 (18) — Megatron-LM's distributed-optimizer table.
  CHECK(bytes_per_param(Optimizer::Adam, Precision::FP16, true).total() == 20);
  CHECK(bytes_per_param(Optimizer::Adam, Precision::BF16, true).total() == 18);
  // bf16 statistics (optimizer_states, DeepSeek-V3's moments) halve them
  // and keep the fp32 master: Adam 4 + 2 + 2 mixed, 2 + 2 in fp32.
  auto bf16 = [](Optimizer o, Precision p = Precision::BF16) {
    Plan plan;
    plan.optimizer = o;
    plan.precision = p;
    plan.optimizer_states = StateDtype::BF16;
    return bytes_per_param(plan).optimizer;
  };
  CHECK(bf16(Optimizer::AdamW) == 8);
  CHECK(bf16(Optimizer::Adam, Precision::FP32) == 4);
  CHECK(bf16(Optimizer::Momentum) == 6);
  CHECK(bf16(Optimizer::Lamb) == 8);
  Plan fp32_states;
  fp32_states.optimizer = Optimizer::AdamW;
  CHECK(bytes_per_param(fp32_states).optimizer == 12);
}

TEST_CASE("Adafactor and SM3 keep Θ(m + n) statistics per matrix") {
  // A 1024×4096 matrix: 4·(1024 + 4096) bytes instead of Adam's 8·1024·4096.
  cost::Op op;
  op.params = 1024 * 4096 + 4096;
  op.matrices = 1;
  op.rows = 1024;
  op.cols = 4096;
  CHECK(factored_state_bytes(op) == 4.0 * (1024 + 4096) + 4.0 * 4096);
  // On a whole model: statistics far below Adam's.
  const auto adafactor = estimate_memory(make("\"gpt2-124m\"", "\"1xa100-80g\"", "{\"global\": 8}",
                                              "{\"optimizer\": \"adafactor\"}"));
  const auto adam = estimate_memory(make("\"gpt2-124m\"", "\"1xa100-80g\"", "{\"global\": 8}", "{}"));
  const double psi = static_cast<double>(adam.stages[0].params);
  const double stats = static_cast<double>(tag(adafactor.stages[0], MemTag::OptimizerStates)) - 4 * psi;
  CHECK(stats > 0);
  CHECK(stats < 0.01 * 8 * psi);
  CHECK(static_cast<double>(tag(adam.stages[0], MemTag::OptimizerStates)) == 12 * psi);
}

// Korthikanti et al. 2022, Table 3 configurations: (layers, hidden, heads,
// tp, pp, microbatch) and the activation totals on the first stage derived
// with their Eq. 5 (no recompute, TP + SP), Eq. 6 (selective + SP) and 2sbhL
// (full recompute, no SP), in GB (published_cases.json, KOR22-*.derived).
struct Kor {
  const char* name;
  int l, h, a, t, p, b;
  double eq5_gb, eq6_gb, full_gb;
};
constexpr Kor kKor[] = {
    {"22B", 48, 6144, 64, 8, 1, 4, 42.5, 10.3, 4.8},
    {"175B", 96, 12288, 96, 8, 8, 1, 34.4, 10.3, 4.8},
    {"530B", 105, 20480, 128, 8, 35, 1, 53.9, 18.7, 8.8},
    {"1T", 128, 25600, 160, 8, 64, 1, 82.2, 28.5, 13.4},
};

Scenario kor(const Kor& k, const std::string& recompute, bool sp, const std::string& schedule = "1f1b",
             int v = 1) {
  const int gpus = k.t * k.p;
  const int m = k.p * 3;  // enough microbatches for the pipeline to fill
  return make(gpt(k.l, k.h, k.a),
              "{\"preset\": \"dgx-a100-80g\", \"nodes\": " + std::to_string(gpus / 8) + "}",
              "{\"global\": " + std::to_string(m * k.b) + ", \"micro\": " + std::to_string(k.b) + "}",
              "{\"tp\": " + std::to_string(k.t) + ", \"pp\": " + std::to_string(k.p) +
                  ", \"sequence_parallel\": " + (sp ? "true" : "false") + ", \"recompute\": \"" +
                  recompute + "\", \"schedule\": \"" + schedule + "\", \"virtual_stages\": " +
                  std::to_string(v) + ", \"implementation\": {\"attention\": \"standard\"}}");
}

TEST_CASE("Korthikanti Eq. 5/6: activations on the first pipeline stage") {
  // The first stage holds p microbatches of L/p layers: L layers' worth.
  // Eq. 5 (TP + SP, no recompute): s·b·h·L/t·(34 + 5as/h); Eq. 6 (selective
  // + SP): 34·s·b·h·L/t; full recompute: 2·s·b·h·L. Embedding and logits
  // terms are excluded, as in the derived values.
  for (const Kor& k : kKor) {
    CAPTURE(k.name);
    const double s = 2048, b = k.b, h = k.h, a = k.a, L = k.l, t = k.t;
    // 530B: 105 layers over 35 stages; the first stage holds 35 microbatches of 3.
    const double eq5 = s * b * h * L / t * (34 + 5 * a * s / h);
    const double eq6 = 34 * s * b * h * L / t;
    const double full = 2 * s * b * h * L;
    const auto none = estimate_memory(kor(k, "none", true)).stages[0];
    const auto sel = estimate_memory(kor(k, "selective", true)).stages[0];
    const auto ful = estimate_memory(kor(k, "full", false)).stages[0];
    CHECK(static_cast<double>(none.activations_stored) == doctest::Approx(eq5).epsilon(1e-9));
    CHECK(static_cast<double>(sel.activations_stored) == doctest::Approx(eq6).epsilon(1e-9));
    CHECK(static_cast<double>(ful.activations_stored) == doctest::Approx(full).epsilon(1e-9));
    {  // the published derived values, 3 significant digits
      CHECK(eq5 / 1e9 == doctest::Approx(k.eq5_gb).epsilon(0.005));
      CHECK(eq6 / 1e9 == doctest::Approx(k.eq6_gb).epsilon(0.005));
      CHECK(full / 1e9 == doctest::Approx(k.full_gb).epsilon(0.01));
    }
  }
}

TEST_CASE("interleaving multiplies first-stage activations by 1 + (p-1)/(p·v)") {
  // Korthikanti Sec. 4.2.3 / Megatron: stage 0 holds p·v + p − 1 chunks of
  // L/(p·v) layers against 1F1B's p microbatches of L/p layers.
  const Kor& k = kKor[1];  // 175B: p = 8, with v = 3 as in the paper
  const double base = static_cast<double>(estimate_memory(kor(k, "selective", true)).stages[0].activations_stored);
  const double inter = static_cast<double>(
      estimate_memory(kor(k, "selective", true, "interleaved", 3)).stages[0].activations_stored);
  CHECK(inter / base == doctest::Approx(1 + 7.0 / 24).epsilon(1e-12));
}

TEST_CASE("in-flight microbatches: GPipe m, 1F1B p − s") {
  // GPipe stashes all m microbatches; 1F1B at most p − s on stage s (MEG21 Sec 2.2.1).
  const auto g = estimate_memory(kor(kKor[1], "full", false, "gpipe"));
  const auto f = estimate_memory(kor(kKor[1], "full", false, "1f1b"));
  for (int s = 0; s < 8; ++s) {
    CHECK(g.stages[static_cast<std::size_t>(s)].in_flight == 24);
    CHECK(f.stages[static_cast<std::size_t>(s)].in_flight == 8 - s);
  }
}

TEST_CASE("every_k and sqrt keep one checkpoint per segment and recompute a segment") {
  // 16 layers on one stage, k = 4: 4 checkpoints (2sbh each) stored; 4 layers
  // recomputed at once in backward. sqrt: ⌈√16⌉ = 4, the same.
  const std::string model = gpt(16, 1024, 16, 1024, 1000);
  auto est = [&](const std::string& plan) {
    return estimate_memory(make(model, "\"1xa100-80g\"", "{\"global\": 1}", plan)).stages[0];
  };
  const auto none = est("{\"implementation\": {\"attention\": \"standard\"}}");
  const auto every4 = est("{\"recompute\": \"every_k\", \"recompute_k\": 4, \"implementation\": {\"attention\": \"standard\"}}");
  const auto sqrt = est("{\"recompute\": \"sqrt\", \"implementation\": {\"attention\": \"standard\"}}");
  const double input = 2.0 * 1024 * 1024;  // s·b·h·2 bytes
  const double layer = static_cast<double>(none.activations_stored) / 16;
  CHECK(static_cast<double>(every4.activations_stored) == 4 * input);
  CHECK(static_cast<double>(sqrt.activations_stored) == 4 * input);
  // Working set: 4 layers recomputed, plus the head's fp32 logits which the
  // loss frees before the first backward of a layer, so the larger wins.
  CHECK(static_cast<double>(every4.activations_working) >= 4 * layer);
}

TEST_CASE("PipeDream stashes p − s weight versions, PipeDream-2BW two") {
  const auto one = estimate_memory(kor(kKor[1], "full", false, "1f1b"));
  const auto pd = estimate_memory(kor(kKor[1], "full", false, "pipedream"));
  const auto bw = estimate_memory(kor(kKor[1], "full", false, "pipedream-2bw"));
  for (int s = 0; s < 8; ++s) {
    const auto i = static_cast<std::size_t>(s);
    CHECK(tag(pd.stages[i], MemTag::Params) == (8 - s) * tag(one.stages[i], MemTag::Params));
    CHECK(tag(bw.stages[i], MemTag::Params) == 2 * tag(one.stages[i], MemTag::Params));
  }
}

TEST_CASE("tied embeddings: the last stage keeps a copy of the word embedding") {
  // GPT-3 175B, pp 8: stage 0 holds 12 layers + the V×h/t embedding + s×h
  // positions; stage 7 holds 12 layers + final norm + its own V×h/t copy.
  const auto est = estimate_memory(kor(kKor[1], "full", false));
  const std::int64_t h = 12288, V = 51200, t = 8;
  const std::int64_t block = 12 * h * h / t + 7 * h / t + 2 * h + 4 * h;
  CHECK(est.stages[0].params == 12 * block + V * h / t + 2048 * h);
  CHECK(est.stages[3].params == 12 * block);
  CHECK(est.stages[7].params == 12 * block + 2 * h + V * h / t);
}

TEST_CASE("offload moves bytes to the host; the GPU keeps a working set") {
  const std::string model = "\"gpt3-1.3b\"";
  auto est = [&](const std::string& plan) {
    return estimate_memory(make(model, "\"1xa100-80g\"", "{\"global\": 4}", plan));
  };
  const auto base = est("{}");
  const auto opt = est("{\"zero\": 2, \"offload\": {\"optimizer\": \"cpu\"}}");
  const double psi = static_cast<double>(base.stages[0].params);
  // ZeRO-Offload: fp32 master, moments and fp32 gradients (16 bytes/param) on the host.
  CHECK(tag(opt.stages[0], MemTag::OptimizerStates) == 0);
  CHECK(tag(opt.stages[0], MemTag::Grads) == 0);
  CHECK(static_cast<double>(opt.stages[0].host_bytes) == doctest::Approx(16 * psi));
  CHECK(opt.host_bytes_per_node == opt.stages[0].host_bytes);  // one GPU per node
  const auto act = est("{\"offload\": {\"activations\": true}}");
  CHECK(act.stages[0].activations_stored < base.stages[0].activations_stored);
  CHECK(act.stages[0].host_bytes == base.stages[0].activations_stored);
  const auto w = est("{\"offload\": {\"weights\": true, \"prefetch_depth\": 1}}");
  CHECK(tag(w.stages[0], MemTag::Params) < tag(base.stages[0], MemTag::Params) / 10);
  const auto nvme = est("{\"zero\": 2, \"offload\": {\"optimizer\": \"nvme\"}}");
  CHECK(static_cast<double>(nvme.stages[0].nvme_bytes) == doctest::Approx(16 * psi));
}

TEST_CASE("weights on NVMe: their bytes on NVMe, the prefetch window in host staging as on the GPU") {
  // ZeRO-Infinity's offload_param with device nvme: every weight lives on
  // NVMe; the host holds pinned staging buffers of the window the GPU
  // holds (the current layer plus prefetch_depth more). fp16 weights are 2
  // bytes a parameter; the optimizer's host bytes are the same either way.
  const std::string model = "\"gpt3-1.3b\"";
  auto est = [&](const std::string& plan) {
    return estimate_memory(make(model, "\"1xa100-80g\"", "{\"global\": 4}", plan));
  };
  const auto host = est(R"({"zero": 2, "offload": {"weights": true, "optimizer": "cpu", "prefetch_depth": 1}})");
  const auto nvme = est(R"({"zero": 2, "offload": {"weights": "nvme", "optimizer": "cpu", "prefetch_depth": 1}})");
  const Bytes window = tag(nvme.stages[0], MemTag::Params);
  CHECK(window == tag(host.stages[0], MemTag::Params));  // the GPU's side is the same
  const double weights = 2.0 * static_cast<double>(est("{}").stages[0].params);
  CHECK(static_cast<double>(nvme.stages[0].nvme_bytes) == doctest::Approx(weights));
  CHECK(static_cast<double>(host.stages[0].host_bytes - nvme.stages[0].host_bytes) ==
        doctest::Approx(weights - static_cast<double>(window)));
  CHECK(host.stages[0].nvme_bytes == 0);
}

TEST_CASE("communication buffers for dp buckets, ZeRO-3 prefetch, pp, cp, ep and compression") {
  auto comm = [](const Scenario& sc) {
    return tag(estimate_memory(sc).stages[0], MemTag::CommBuffers);
  };
  const std::string dgx = "{\"preset\": \"dgx-h100\", \"nodes\": 2}";
  const Bytes dp = comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}", "{}"));
  CHECK(dp == 2 * 25 * kMiB);  // two 25 MiB gradient buckets
  CHECK(comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}", "{\"zero\": 3}")) > dp);
  CHECK(comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}",
                  "{\"compression\": {\"method\": \"topk\", \"ratio\": 0.01}}")) > dp);
  // Context parallelism on GPU kernels holds its exchange in each attention
  // block's backward (ActivationRule::exchange, the next test), not beside
  // the buckets for the whole step.
  CHECK(comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}", "{\"dp\": 4, \"cp\": 4}")) == dp);
  CHECK(comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}",
                  "{\"dp\": 4, \"cp\": 4, \"implementation\": {\"cp_comm\": \"all_gather\"}}")) == dp);
  CHECK(comm(make("\"mixtral-8x7b\"", dgx, "{\"global\": 16}", "{\"ep\": 8}")) > 0);
  CHECK(comm(make("\"llama3-8b\"", dgx, "{\"global\": 16}", "{\"dp\": 4, \"pp\": 4}")) > 0);
}

TEST_CASE("sequence parallelism: a column-parallel linear keeps its input's shard, or the gathered input") {
  // Llama-3-8B, sequence 8,192, microbatch 1, tp 8 with sequence
  // parallelism, bf16. Megatron-LM's linears keep the sequence shard of the
  // QKV and MLP-up inputs (8,192 / 8 tokens × 4,096 × 2 bytes each) and
  // gather it again in the backward; PyTorch DTensor's keep the gathered
  // input (8,192 tokens): 2 × 8,192 × 4,096 × 2 × (1 − 1/8) bytes more per
  // layer, and nothing else changes. Without sequence parallelism the
  // setting does nothing (the input is whole on every rank either way).
  auto full = [](const std::string& plan) {
    const Scenario sc = make("\"llama3-8b\"", R"({"preset": "dgx-h100", "nodes": 1})", R"({"global": 8})", plan);
    return ActivationRule::of(cost::expand(sc.model, expand_options(sc)), sc)[0].full;
  };
  const Bytes shard = full(R"({"tp": 8, "sequence_parallel": true})");
  const Bytes gathered = full(R"({"tp": 8, "sequence_parallel": true, "implementation": {"sp_regather_input": false}})");
  CHECK(gathered - shard == 2LL * 8192 * 4096 * 2 * 7 / 8);
  CHECK(full(R"({"tp": 8, "implementation": {"sp_regather_input": false}})") == full(R"({"tp": 8})"));
}

TEST_CASE("ZeRO-3 stages each layer's gradient for its reduce-scatter in the layer's backward") {
  // Llama-3-8B (a block 218,112,000 parameters, the previous test), 16
  // GPUs, ZeRO-3, bf16: autograd's whole gradient of the layer (2 bytes a
  // parameter) and FSDP2's reduce-scatter input in the reduction's dtype,
  // a copy: fp32 with fp32_grad_accumulation (4 bytes: 6 in all), bf16
  // without (2: 4 in all). None under ZeRO-2 (its gradients are reduced
  // in buckets), on one GPU (nothing to shard) or under the CPU kernels
  // (their own declarations).
  const Bytes layer = 4096LL * (4096 + 2 * 1024) + 4096LL * 4096 + 3 * 4096LL * 14336 + 2 * 4096;
  auto staging = [](const std::string& plan, const std::string& cluster = R"({"preset": "dgx-h100", "nodes": 2})",
                    bool cpu = false) {
    Scenario sc = make("\"llama3-8b\"", cluster, R"({"global": 16})", plan);
    if (cpu) sc.kernel_memory = KernelMemory::Cpu;
    const auto rules = ActivationRule::of(cost::expand(sc.model, expand_options(sc)), sc);
    REQUIRE(rules.size() == 1);
    return rules[0].staging;
  };
  CHECK(staging(R"({"zero": 3, "precision": "bf16"})") == 4 * layer);
  CHECK(staging(R"({"zero": 3, "precision": "bf16", "implementation": {"fp32_grad_accumulation": true}})") ==
        6 * layer);
  CHECK(staging(R"({"zero": 2, "precision": "bf16"})") == 0);
  CHECK(staging(R"({"zero": 3, "precision": "bf16"})", "\"1xh100-sxm\"") == 0);
  CHECK(staging(R"({"zero": 3, "precision": "bf16"})", R"({"preset": "dgx-h100", "nodes": 2})", true) == 0);
  // Held in the backward: a chunk of layers that keep everything has one
  // backward's holds, the op gradient and the staging, as working set.
  const Scenario sc = make("\"llama3-8b\"", R"({"preset": "dgx-h100", "nodes": 2})", R"({"global": 16})",
                           R"({"zero": 3, "precision": "bf16"})");
  const auto rule = ActivationRule::of(cost::expand(sc.model, expand_options(sc)), sc)[0];
  const std::vector<Keep> keeps(4, Keep::All);
  const std::vector<Swap> swaps(4, Swap::None);
  CHECK(rule.chunk(keeps, swaps).working == rule.grad + 4 * layer);
}

TEST_CASE("DeepSpeed's ZeRO-3 gradient bucket: allocated once for the step, a full bucket's flat copy in the backward") {
  // Llama-3-8B on 16 GPUs, ZeRO-3, bf16, zero3_reduce_bucket 5e8 elements
  // (DeepSpeed's reduce_bucket_size): the bucket is a communication buffer
  // of 5e8 × 2 bytes for the whole step; each layer's backward holds the
  // largest weight's gradient before its copy into the bucket (the MLP's
  // gate or up projection, 4,096 × 14,336, or its down projection) and a full
  // bucket's flattened copy (5e8 × 2 bytes, fewer than the model's 8.03 B
  // parameters) in place of FSDP's whole-layer staging (4 bytes a
  // parameter, the previous test). A bucket larger than the model copies
  // the model's parameters at most.
  const std::string dgx = R"({"preset": "dgx-h100", "nodes": 2})";
  auto scenario = [&](std::int64_t bucket) {
    return make("\"llama3-8b\"", dgx, R"({"global": 16})",
                R"({"zero": 3, "precision": "bf16", "implementation": {"zero3_reduce_bucket": )" +
                    std::to_string(bucket) + "}}");
  };
  auto rule = [](const Scenario& sc) { return ActivationRule::of(cost::expand(sc.model, expand_options(sc)), sc)[0]; };
  const Bytes layer = 4096LL * (4096 + 2 * 1024) + 4096LL * 4096 + 3 * 4096LL * 14336 + 2 * 4096;
  const Bytes largest = 4096LL * 14336;
  const Scenario fsdp = scenario(0), ds = scenario(500'000'000);
  CHECK(rule(fsdp).staging == 4 * layer);
  CHECK(rule(ds).staging == 2 * (largest + 500'000'000));
  const Scenario huge = scenario(20'000'000'000);
  const auto chain = cost::expand(huge.model, expand_options(huge));
  CHECK(chain.params() < 20'000'000'000);
  CHECK(rule(huge).staging == 2 * (largest + chain.params()));
  // The bucket itself, for the whole step.
  auto comm = [](const Scenario& sc) { return tag(estimate_memory(sc).stages[0], MemTag::CommBuffers); };
  CHECK(comm(ds) - comm(fsdp) == 2 * 500'000'000);
  // Not under ZeRO-2 (DDP-style buckets) nor the CPU kernels.
  Scenario z2 = scenario(500'000'000);
  z2.plan.zero = 2;
  CHECK(rule(z2).staging == 0);
  Scenario cpu = scenario(500'000'000);
  cpu.kernel_memory = KernelMemory::Cpu;
  Scenario cpu0 = scenario(0);
  cpu0.kernel_memory = KernelMemory::Cpu;
  CHECK(rule(cpu).staging == 0);
  CHECK(comm(cpu) == comm(cpu0));
}

TEST_CASE("DeepSpeed's parameter coordinator: what its trace holds gathered at most") {
  // Four units of 10 elements used A B C D in the forward and D C B A in
  // the backward.
  std::vector<GatherUse> trace;
  for (const std::int64_t u : {0, 1, 2, 3, 3, 2, 1, 0}) trace.push_back({u, 10.0});
  const double big = 1e12;
  // Nothing prefetched, nothing kept: one unit at a time.
  CHECK(coordinator_peak(trace, 0, big, 0) == 10);
  // Kept while fewer than 25 elements of uses come between: D (nothing
  // between its two uses) and C (D's two uses, 20), not B (40): C and D.
  CHECK(coordinator_peak(trace, 0, big, 25) == 20);
  // Kept whatever the distance: every unit until its last use, all four at
  // the turn.
  CHECK(coordinator_peak(trace, 0, big, big) == 40);
  // Prefetching without a cap: at A's use the prefetch gathers B, C, D and
  // passes the later uses of D, C, B and A, so nothing is released before
  // its last use.
  CHECK(coordinator_peak(trace, big, big, 0) == 40);
  // Prefetching 15 elements a use: at A's, B and C (stopping once 15 or
  // more are fetched); at B's, D and, after passing the gathered units'
  // later uses, A again: 40 at B's use.
  CHECK(coordinator_peak(trace, 15, big, 0) == 40);
  // max_live caps what a use prefetches at max_live less what is gathered
  // (checked before each unit): at A's use 10 gathered, 5 more allowed, B
  // fetched (20), then nothing more.
  CHECK(coordinator_peak(trace, big, 15, 0) == 20);
  // On a model: GPT-3 1.3B on 16 GPUs under the deepspeed stack (ZeRO-3,
  // modules gathered one by one, prefetch 5e7, max live 1e9, reuse 1e9).
  // Its modules (4.2-16.8 M elements) are smaller than the prefetch bucket,
  // so the prefetch runs ahead until 1e9 elements are gathered: at least
  // that (where FSDP's rule holds a layer and the next, 2 × 50.3 M, and the
  // output layer), and less than the model's 1.3 B parameters (what a use
  // gathers on demand, and what the coordinator keeps for a reuse, max_live
  // does not cap).
  const Scenario ds = parse_scenario(R"({"model": "gpt3-1.3b", "cluster": {"preset": "dgx-h100", "nodes": 2},
      "stack": "deepspeed", "batch": {"global": 16}, "plan": {"zero": 3, "precision": "bf16"}})",
                                     "test.json");
  const double gathered = static_cast<double>(tag(estimate_memory(ds).stages[0], MemTag::CommBuffers) -
                                              2 * ds.plan.implementation.zero3_reduce_bucket) /
                          2.0;
  CHECK(gathered >= 1e9);
  const auto chain = cost::expand(ds.model, expand_options(ds));
  CHECK(gathered < static_cast<double>(chain.params()));
}

TEST_CASE("context parallelism's exchange, by algorithm, held in an attention block's backward") {
  // Llama 3 8B (32 query heads and 8 KV heads of 128), sequence 8,192,
  // microbatch 1, cp 4, bf16: one rank's K and V are kv = 2 · 2,048 tokens
  // · 1,024 · 2 bytes = 8 MiB, its queries q = 2,048 · 4,096 · 2 = 16 MiB.
  // Ring attention double-buffers a neighbour's K and V (2·kv = 16 MiB);
  // Transformer Engine's all-gather holds the group's K and V and their
  // gradients (2·cp·kv = 64 MiB); PyTorch's all-gather rotation the
  // group's K | V (cp·kv = 32 MiB) and, in fp32 (twice bf16's bytes), the
  // K/V gradient it accumulates, sends and receives (3 · 2·kv = 48 MiB)
  // and the query gradient it accumulates (2·q = 32 MiB): 112 MiB.
  const std::string dgx = "{\"preset\": \"dgx-h100\", \"nodes\": 2}";
  auto at = [&](const std::string& cp_comm, std::int64_t cp = 4) {
    return make("\"llama3-8b\"", dgx, "{\"global\": 16}",
                "{\"dp\": " + std::to_string(16 / cp) + ", \"cp\": " + std::to_string(cp) +
                    ", \"implementation\": {\"cp_comm\": \"" + cp_comm + "\"}}");
  };
  CHECK(cp_exchange_bytes(at("p2p")) == 16 * kMiB);
  CHECK(cp_exchange_bytes(at("all_gather")) == 64 * kMiB);
  CHECK(cp_exchange_bytes(at("all_gather_ring")) == 112 * kMiB);
  CHECK(cp_exchange_bytes(at("all_gather_ring", 1)) == 0);  // no context parallelism
  Scenario cpu = at("all_gather");
  cpu.kernel_memory = KernelMemory::Cpu;  // the CPU kernels declare their own copies
  CHECK(cp_exchange_bytes(cpu) == 0);
  // Each block (all attention blocks) holds it in its backward: a chunk of
  // layers that keep everything has as working set one backward's holds,
  // the gradient plus the exchange, so the algorithms' working sets differ
  // by their exchanges exactly.
  auto working = [&](const Scenario& sc) {
    const auto rules = ActivationRule::of(cost::expand(sc.model, expand_options(sc)), sc);
    REQUIRE(rules.size() == 1);
    CHECK(rules[0].exchange == cp_exchange_bytes(sc));
    const std::vector<Keep> keeps(4, Keep::All);
    const std::vector<Swap> swaps(4, Swap::None);
    return rules[0].chunk(keeps, swaps).working;
  };
  CHECK(working(at("all_gather_ring")) - working(at("p2p")) == 96 * kMiB);
  CHECK(working(at("all_gather")) - working(at("p2p")) == 48 * kMiB);
}

TEST_CASE("ZeRO-3's gathered weights: two layers, and the embedding and output layer per use or held (FSDP's root)") {
  // Llama-3-8B (vocab 128,256, hidden 4,096, untied; a block 218,112,000
  // parameters: 4·4096² attention with 8 of 32 KV heads' K and V —
  // 4096·(4096 + 2·1024) + 4096² — and 3·4096·14,336 MLP, two norms),
  // bf16 weights (2 bytes), 16 GPUs, ZeRO-3 (no gradient buckets: it
  // reduces layer by layer, staged in each layer's backward, the next
  // test). Gathered per use (DeepSpeed), a layer and the larger
  // of a layer and what is gathered in its place, the embedding or the
  // output layer (525,336,576 = 128,256·4,096; the head adds the final
  // norm's 4,096): 218,112,000 + 525,340,672 parameters. FSDP keeps its
  // root module (the embedding, the final norm, the output layer) gathered
  // from its forward to its backward's end, beside the two layers:
  // 2·218,112,000 + 2·525,336,576 + 4,096; and it reduce-scatters the
  // root's gradients only at the backward's end, so the output layer's
  // gradient (its 525,340,672 parameters with the final norm, bf16) is held
  // from its backward on.
  auto comm = [](const std::string& implementation) {
    const Scenario sc = make("\"llama3-8b\"", R"({"preset": "dgx-h100", "nodes": 2})", R"({"global": 16})",
                             R"({"zero": 3, "implementation": )" + implementation + "}");
    return static_cast<double>(tag(estimate_memory(sc).stages[0], MemTag::CommBuffers));
  };
  const double layer = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3 * 4096.0 * 14336 + 2 * 4096;
  const double vocab = 128256.0 * 4096;
  CHECK(comm("{}") == 2 * (layer + vocab + 4096));
  CHECK(comm(R"({"zero3_root_unsharded": true})") == 2 * (2 * layer + 2 * vocab + 4096) + 2 * (vocab + 4096));
  // Two pipeline stages (dp 8): the first holds the embedding, the last the
  // output layer and norm; each a layer's weights more held than per use
  // (2 layers + E against a layer + max(layer, E), E larger than a layer),
  // and the last the output layer's gradient too.
  auto stage_comm = [](const std::string& implementation, int s) {
    const Scenario sc = make("\"llama3-8b\"", R"({"preset": "dgx-h100", "nodes": 2})", R"({"global": 16})",
                             R"({"zero": 3, "pp": 2, "implementation": )" + implementation + "}");
    return static_cast<double>(tag(estimate_memory(sc).stages[static_cast<std::size_t>(s)], MemTag::CommBuffers));
  };
  for (int s : {0, 1}) {
    CAPTURE(s);
    CHECK(stage_comm(R"({"zero3_root_unsharded": true})", s) - stage_comm("{}", s) ==
          2 * layer + (s == 1 ? 2 * (vocab + 4096) : 0));
  }
}

TEST_CASE("fits when the tensors and the CUDA context do: the allocator's reserve is released under pressure") {
  // The same plan on GPUs of three sizes. The required bytes (every tag but
  // the allocator's reserve) do not depend on the GPU; the plan fits a GPU
  // between them and the peak with the reserve (the caching allocator frees
  // its unused cached blocks and retries rather than failing), and not one
  // below them, where it needs exactly the required bytes.
  const auto on = [](double gib) {
    return estimate_memory(make(gpt(24, 2048, 16), "{\"gpu\": {\"preset\": \"a100-80g\", \"memory_GiB\": " +
                                                       std::to_string(gib) + "}, \"gpus_per_node\": 8}",
                                "{\"global\": 64, \"micro\": 8}", "{\"dp\": 8}"));
  };
  const MemoryEstimate big = on(80);
  REQUIRE(big.feasible());
  const Bytes reserve = big.breakdown[static_cast<std::size_t>(MemTag::AllocatorReserve)];
  REQUIRE(reserve > kGiB);  // a reserve worth the distinction
  CHECK(big.required_bytes == big.peak_bytes - reserve);
  const double required = static_cast<double>(big.required_bytes) / static_cast<double>(kGiB);
  const double peak = static_cast<double>(big.peak_bytes) / static_cast<double>(kGiB);
  const MemoryEstimate between = on((required + peak) / 2);
  CHECK(between.feasible());
  CHECK(between.required_bytes == big.required_bytes);
  CHECK(between.peak_bytes > between.gpu_capacity);  // the reserve would not fit
  const MemoryEstimate below = on(required - 0.5);
  REQUIRE_FALSE(below.feasible());
  CHECK(below.infeasible->needs == big.required_bytes);
}

TEST_CASE("a published out-of-memory run stays out of memory: torchtitan's Llama 2 70B, selective op, local batch 2") {
  // torchtitan docs/performance.md (64 A100-80GB, FSDP2 over all 64): "the
  // 70B training with local batch size 2 will cause an OOM error when
  // selective activation checkpointing is used, we report the local batch
  // size 1 case instead" (its row: 355 tokens/s). The fit leaves out the
  // allocator's reserve; the tensors and the context alone must still call
  // both runs right.
  const auto at = [](int local) {
    return estimate_memory(parse_scenario(
        R"({"model": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
                      "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm", "bias": false,
                      "position_embedding": "rope", "tied_embeddings": false, "dropout": false, "seq_len": 4096},
            "cluster": {"preset": "dgx-a100-80g", "nodes": 8},
            "batch": {"global": )" + std::to_string(64 * local) + R"(, "micro": )" + std::to_string(local) + R"(},
            "plan": {"dp": 64, "zero": 3, "recompute": "selective_op", "precision": "bf16"},
            "stack": "torchtitan"})",
        "titan.json"));
  };
  CHECK(at(1).feasible());
  const MemoryEstimate two = at(2);
  REQUIRE_FALSE(two.feasible());
  CHECK(two.infeasible->needs > 80 * kGiB);
}

TEST_CASE("an out-of-memory plan is a result with the numbers") {
  // GPT-3 175B on 8 A100-80GB with plain data parallelism cannot hold
  // 16 bytes × 175 B parameters.
  const auto est = estimate_memory(make("\"gpt3-175b\"", "{\"preset\": \"dgx-a100-80g\"}",
                                        "{\"global\": 8}", "{}"));
  REQUIRE_FALSE(est.feasible());
  CHECK(est.infeasible->pool == "gpu");
  CHECK(est.infeasible->has == 80 * kGiB);
  // What it needs is what must fit: the peak less the allocator's reserve.
  CHECK(est.infeasible->needs == est.required_bytes);
  CHECK(est.required_bytes == est.peak_bytes - est.breakdown[static_cast<std::size_t>(MemTag::AllocatorReserve)]);
  CHECK(static_cast<double>(est.peak_bytes) > 16 * 174.6e9);
}

TEST_CASE("DeepSpeed ZeRO tutorial: 1.5B GPT-2 on 8 V100-32GB") {
  // DS_ZTUT: Adam state of a 1.5B model is 18 GB (12 bytes/param); ZeRO-1 over 8
  // ranks leaves 2.25 GB per device; without ZeRO it runs out of memory,
  // with ZeRO-1 it trains. DeepSpeed's fp16 optimizer keeps fp32 gradients
  // (fp32_grad_accumulation); sequence 1024 and no recompute as in the
  // tutorial's script (microbatch 1).
  auto sc = [](int zero) {
    return make(gpt(48, 1600, 16, 1024, 50257), "{\"gpu\": \"v100-32g\", \"gpus_per_node\": 8}",
                "{\"global\": 8}",
                "{\"zero\": " + std::to_string(zero) +
                    ", \"precision\": \"fp16\", \"implementation\": {\"fp32_grad_accumulation\": true}}");
  };
  const auto z0 = estimate_memory(sc(0));
  const auto z1 = estimate_memory(sc(1));
  const double psi = static_cast<double>(z0.stages[0].params);
  CHECK(psi == doctest::Approx(1.5e9).epsilon(0.05));
  CHECK(static_cast<double>(tag(z0.stages[0], MemTag::OptimizerStates)) == 12 * psi);
  CHECK(static_cast<double>(tag(z1.stages[0], MemTag::OptimizerStates)) == 12 * psi / 8);
  CHECK(static_cast<double>(tag(z1.stages[0], MemTag::OptimizerStates)) / 1e9 ==
        doctest::Approx(2.25).epsilon(0.05));
  CHECK_FALSE(z0.feasible());
  CHECK(z1.feasible());
}

TEST_CASE("ZeRO fits and limits: DDP near 1.4B, 13B with ZeRO-2 on 128 V100s, ZeRO-Offload 10B on one") {
  // ZERO Sec 10.4: plain data parallelism tops out near 1.4B parameters on
  // 32 GB V100s; ZeRO-2 trains 13B on 128 of them. DS_ZOFFTUT: ZeRO-Offload
  // trains 10B (50 × 4096) on one V100-32GB with batch 10 and checkpointing.
  // Model shapes are chosen here (the paper's Table 4 is not transcribed):
  // GPT-2-like, sequence 1024, microbatch 1, full recompute, fp16 with
  // DeepSpeed's fp32 gradient copy.
  const std::string fp16 =
      "\"precision\": \"fp16\", \"recompute\": \"full\", \"implementation\": {\"fp32_grad_accumulation\": true}";
  auto fits = [&](const std::string& model, int nodes, const std::string& extra) {
    const auto sc = make(model, "{\"gpu\": \"v100-32g\", \"gpus_per_node\": 16, \"nodes\": " + std::to_string(nodes) + "}",
                         "{\"global\": " + std::to_string(16 * nodes) + "}", "{" + fp16 + extra + "}");
    return estimate_memory(sc).feasible();
  };
  CHECK(fits(gpt(48, 1536, 16, 1024, 50257), 2, ""));         // 1.44B, DDP
  CHECK_FALSE(fits(gpt(48, 1792, 16, 1024, 50257), 2, ""));   // 1.94B, DDP
  CHECK(fits(gpt(40, 5120, 40, 1024, 50257), 8, ", \"zero\": 2"));  // 12.9B, ZeRO-2, 128 GPUs
  CHECK_FALSE(fits(gpt(40, 5120, 40, 1024, 50257), 8, ""));
  const auto offload = make(gpt(50, 4096, 32, 1024, 50257), "\"1xv100-32g\"",
                            "{\"global\": 10, \"micro\": 10}",
                            "{" + fp16 + ", \"zero\": 2, \"offload\": {\"optimizer\": \"cpu\"}}");
  CHECK(estimate_memory(offload).feasible());
  const auto no_offload = make(gpt(50, 4096, 32, 1024, 50257), "\"1xv100-32g\"",
                               "{\"global\": 10, \"micro\": 10}", "{" + fp16 + ", \"zero\": 2}");
  CHECK_FALSE(estimate_memory(no_offload).feasible());
}

// The analytical model against the replayed timeline, stage by stage, for
// every schedule and per-layer recompute policy (optimal recompute within a
// budget halfway between no and full recompute's peaks), on balanced
// pipelines: they must agree exactly.
TEST_CASE("analytical memory equals the simulated timeline") {
  const char* schedules[] = {"gpipe", "1f1b", "interleaved", "pipedream", "pipedream-2bw"};
  // every_k2 and every_k3: every_k with k = 2 and 3.
  const char* policies[] = {"none", "selective", "full", "every_k2", "sqrt", "every_k3", "optimal"};
  for (const char* sched : schedules) {
    for (const char* pol : policies) {
      for (bool tied : {true, false}) {
        const std::string sched_name = sched, policy = pol;
        CAPTURE(sched_name);
        CAPTURE(policy);
        CAPTURE(tied);
        const bool inter = std::string(sched) == "interleaved";
        // 16 layers over 4 stages (× 2 chunks when interleaved): chunks of 4
        // or 2 layers; every_k with k = 2 and sqrt (√4 = 2, √2 → 2) divide
        // them, k = 3 leaves a short last segment.
        const std::string model =
            "{\"layers\": 16, \"hidden\": 512, \"heads\": 8, \"seq_len\": 256, \"vocab\": 5000, "
            "\"tied_embeddings\": " + std::string(tied ? "true" : "false") + "}";
        auto with = [&](const std::string& rec) {
          const bool every = rec.rfind("every_k", 0) == 0;
          const std::string plan = std::string("{\"pp\": 4, \"tp\": 2, \"schedule\": \"") + sched +
                                   "\", \"virtual_stages\": " + (inter ? "2" : "1") +
                                   ", \"recompute\": \"" + (every ? "every_k" : rec) + "\"" +
                                   (every ? ", \"recompute_k\": " + rec.substr(7) : "") +
                                   ", \"implementation\": {\"attention\": \"standard\"}}";
          return make(model, "{\"preset\": \"dgx-h100\"}", "{\"global\": 8}", plan);
        };
        auto sc = with(pol);
        if (sc.plan.recompute == Recompute::Optimal) {
          const double none = static_cast<double>(estimate_memory(with("none")).peak_bytes);
          const double full = static_cast<double>(estimate_memory(with("full")).peak_bytes);
          sc.plan.memory_budget_GiB = (none + full) / 2 / static_cast<double>(kGiB);
        }
        const auto a = estimate_memory(sc);
        const auto t = simulate_memory(sc);
        CHECK(t.source == "timeline");
        CHECK(t.layers == a.layers);
        REQUIRE(a.stages.size() == t.stages.size());
        for (std::size_t s = 0; s < a.stages.size(); ++s) {
          CAPTURE(s);
          CHECK(tag(t.stages[s], MemTag::Activations) == tag(a.stages[s], MemTag::Activations));
          CHECK(t.stages[s].total == a.stages[s].total);
        }
        CHECK(t.peak_bytes == a.peak_bytes);
        if (a.budget) CHECK(a.required_bytes <= *a.budget);
      }
    }
  }
}

TEST_CASE("blocks of two kinds: each stage holds its own blocks' parameters and activations") {
  // A MoE model whose first 3 of 8 blocks are dense (DeepSeek's
  // first_k_dense_replace), over pp 2: stage 0 holds the embedding, the 3
  // dense blocks and one expert block; stage 1 four expert blocks and the
  // head. Its parameters are those blocks' own, and the analytical
  // activations equal the timeline's, stage by stage, under every policy.
  const std::string model =
      R"({"layers": 8, "hidden": 512, "heads": 8, "ffn_hidden": 2048, "seq_len": 256, "vocab": 5000,
          "tied_embeddings": false, "moe": {"experts": 8, "top_k": 2, "expert_ffn": 512, "first_dense": 3}})";
  for (const char* pol : {"none", "selective", "full", "every_k", "optimal"}) {
    for (const char* sched : {"1f1b", "interleaved"}) {
      const std::string policy = pol, schedule = sched;
      CAPTURE(policy);
      CAPTURE(schedule);
      const bool inter = schedule == "interleaved";
      auto with = [&](const std::string& rec) {
        return make(model, "{\"preset\": \"dgx-h100\"}", "{\"global\": 8}",
                    "{\"pp\": 2, \"tp\": 2, \"schedule\": \"" + schedule + "\", \"virtual_stages\": " +
                        (inter ? "2" : "1") + ", \"recompute\": \"" + rec + "\"" +
                        (rec == "every_k" ? ", \"recompute_k\": 2" : "") +
                        ", \"implementation\": {\"attention\": \"standard\"}}");
      };
      Scenario sc = with(policy);
      if (sc.plan.recompute == Recompute::Optimal) {
        const double none = static_cast<double>(estimate_memory(with("none")).peak_bytes);
        const double full = static_cast<double>(estimate_memory(with("full")).peak_bytes);
        sc.plan.memory_budget_GiB = (none + full) / 2 / static_cast<double>(kGiB);
      }
      const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
      REQUIRE(chain.kinds.size() == 2);
      const std::int64_t dense = chain.kinds[1].params(), expert = chain.kinds[0].params();
      CHECK(dense != expert);
      const auto a = estimate_memory(sc);
      REQUIRE(a.stages.size() == 2);
      // Interleaved, the chunks are layers 0-1, 2-3 (stage 0, 1), 4-5, 6-7:
      // stage 0 holds layers 0, 1, 4, 5.
      const std::int64_t stage0 = inter ? 2 * dense + 2 * expert : 3 * dense + expert;
      const std::int64_t stage1 = inter ? dense + 3 * expert : 4 * expert;
      CHECK(a.stages[0].params == chain.embedding.params() + stage0);
      CHECK(a.stages[1].params == chain.head.params() + stage1);
      const auto t = simulate_memory(sc);
      CHECK(t.layers == a.layers);
      for (std::size_t s = 0; s < 2; ++s) {
        CAPTURE(s);
        CHECK(tag(t.stages[s], MemTag::Activations) == tag(a.stages[s], MemTag::Activations));
        CHECK(t.stages[s].total == a.stages[s].total);
      }
      // Optimal recompute searches as if every layer were the largest kind:
      // what it picks fits when each layer is counted as its own.
      if (a.budget) CHECK(a.required_bytes <= *a.budget);
    }
  }
}

TEST_CASE("recompute_modules mlp reruns a MoE model's dense blocks only, and is refused where there are none") {
  // 8 blocks, the first 3 dense, pp 1, tp 1, one microbatch in flight:
  // adding "mlp" to the modules drops, in each dense block only, its MLP
  // activation's and down-projection's saved inputs (cost::Layer::
  // saved_bytes under the policy), so the step's activations fall by
  // three times one dense block's difference.
  const std::string moe = R"({"experts": 8, "top_k": 2, "expert_ffn": 512)";
  auto with = [&](const std::string& first_dense, const std::string& mods) {
    return make(R"({"layers": 8, "hidden": 512, "heads": 8, "ffn_hidden": 2048, "seq_len": 256, "vocab": 5000,
                    "moe": )" + moe + first_dense + "}}",
                R"({"preset": "dgx-h100", "nodes": 1})", R"({"global": 8})",
                R"({"dp": 8, "recompute": "selective", "recompute_modules": )" + mods + "}");
  };
  const Scenario plain = with(R"(, "first_dense": 3)", R"(["core_attn"])");
  const Scenario mlp = with(R"(, "first_dense": 3)", R"(["core_attn", "mlp"])");
  CHECK(first_violation(mlp) == std::nullopt);
  const cost::OpChain a = cost::expand(plain.model, expand_options(plain));
  const cost::OpChain b = cost::expand(mlp.model, expand_options(mlp));
  const Bytes dense_saved = a.kinds[1].saved_bytes(Recompute::Selective) - b.kinds[1].saved_bytes(Recompute::Selective);
  CHECK(dense_saved > 0);
  CHECK(a.kinds[0].saved_bytes(Recompute::Selective) == b.kinds[0].saved_bytes(Recompute::Selective));
  const Bytes before = tag(estimate_memory(plain).stages[0], MemTag::Activations);
  const Bytes after = tag(estimate_memory(mlp).stages[0], MemTag::Activations);
  CHECK(before - after == 3 * dense_saved);
  // Without dense blocks "mlp" would change nothing: refused by name.
  CHECK_THROWS_WITH_AS(with("", R"(["core_attn", "mlp"])"),
                       "test.json: plan.recompute_modules: \"mlp\" reruns dense MLPs; every block of custom has "
                       "routed experts (moe.first_dense is 0), so it would change nothing",
                       InputError);
}

TEST_CASE("partition_activations: a recomputed layer keeps 1/tp of its input, in the timeline as in the model") {
  // 16 layers over pp 4 (1F1B), tp 2, full recompute, m = 8: stage 0 holds
  // 4 microbatches in flight (p − s) of 4 layers, each keeping its input
  // b·s·h·2 bytes (1·256·512·2) whole without the option and half of it
  // with; the step's working set differs by the input: without the option
  // a layer reruns from the input it kept (the same tensor), with it from a
  // whole input all-gathered anew.
  auto with = [&](bool split) {
    return make(gpt(16, 512, 8, 256, 5000), R"({"preset": "dgx-h100"})", R"({"global": 8})",
                std::string(R"({"pp": 4, "tp": 2, "recompute": "full", "partition_activations": )") +
                    (split ? "true" : "false") + "}");
  };
  const Scenario plain = with(false), split = with(true);
  const Bytes input = 1LL * 256 * 512 * 2;
  const auto a = estimate_memory(plain), b = estimate_memory(split);
  CHECK(tag(a.stages[0], MemTag::Activations) - tag(b.stages[0], MemTag::Activations) ==
        4 * 4 * (input - input / 2) - input);
  for (const Scenario* sc : {&plain, &split}) {
    const auto est = estimate_memory(*sc);
    const auto t = simulate_memory(*sc);
    for (std::size_t s = 0; s < est.stages.size(); ++s) {
      CAPTURE(s);
      CHECK(tag(t.stages[s], MemTag::Activations) == tag(est.stages[s], MemTag::Activations));
    }
  }
  // Refused where it cannot act, naming the rule's reason.
  CHECK_THROWS_WITH_AS(make(gpt(16, 512, 8, 256, 5000), R"({"preset": "dgx-h100"})", R"({"global": 8})",
                            R"({"tp": 2, "recompute": "selective", "partition_activations": true})"),
                       "test.json: plan.partition_activations: splits the layer inputs recomputed segments keep; "
                       "recompute \"selective\" keeps none (use full, every_k, sqrt, every_nth or optimal)",
                       InputError);
  CHECK_THROWS_WITH_AS(make(gpt(16, 512, 8, 256, 5000), R"({"preset": "dgx-h100"})", R"({"global": 8})",
                            R"({"tp": 1, "recompute": "full", "partition_activations": true})"),
                       "test.json: plan.partition_activations: splits the layer inputs recomputed segments keep "
                       "over the tp ranks: needs tp > 1",
                       InputError);
  CHECK_THROWS_WITH_AS(
      make(gpt(16, 512, 8, 256, 5000), R"({"preset": "dgx-h100"})", R"({"global": 8})",
           R"({"tp": 2, "sequence_parallel": true, "recompute": "full", "partition_activations": true})"),
      "test.json: plan.partition_activations: with sequence parallelism each tp rank keeps 1/tp of a layer's "
      "input already, so it would change nothing (Megatron-LM uses it only without: "
      "distribute_saved_activations and not sequence_parallel)",
      InputError);
}

TEST_CASE("torchtitan's loss under tensor parallelism (loss_parallel) holds 4 bytes per logit more than F.cross_entropy") {
  // Llama 3 8B, two sequences of 8192, tp 4 with sequence parallelism,
  // full recompute: the peak is the loss's backward. loss_parallel's fused
  // backward holds the zeros-and-scatter tensor, its sum with exp(output)
  // and their product beside the saved output (12 bytes per logit of the
  // rank's vocabulary shard) where F.cross_entropy holds two gradients (8).
  const Scenario sc = parse_scenario(R"({"model": {"preset": "llama3-8b", "seq_len": 8192},
      "cluster": {"preset": "dgx-h100", "nodes": 1}, "batch": {"global": 4, "micro": 2}, "stack": "torchtitan",
      "plan": {"dp": 2, "tp": 4, "sequence_parallel": true, "zero": 3, "recompute": "full", "precision": "bf16"}})",
                                     "s.json");
  REQUIRE(sc.plan.implementation.cross_entropy == CrossEntropy::Parallel);  // the stack's, tp > 1
  Scenario unfused = sc;
  unfused.plan.implementation.cross_entropy = CrossEntropy::Unfused;
  const double shard_logits = 2.0 * 8192 * 128256 / 4;
  for (const bool timeline : {false, true}) {
    CAPTURE(timeline);
    const MemoryEstimate p = timeline ? simulate_memory(sc) : estimate_memory(sc);
    const MemoryEstimate u = timeline ? simulate_memory(unfused) : estimate_memory(unfused);
    CHECK(static_cast<double>(tag(p.stages[0], MemTag::Activations) - tag(u.stages[0], MemTag::Activations)) ==
          doctest::Approx(4 * shard_logits).epsilon(1e-9));
    CHECK(model_states(p.stages[0]) == model_states(u.stages[0]));
  }
}

TEST_CASE("torchtitan's unfused loss holds 6 bytes per logit more at the peak, the allocator's 20 % on top") {
  // Llama 3.1 8B as torchtitan runs it (docs/accuracy.md): two sequences of
  // 8192 tokens, vocabulary 128256, no tensor parallelism.
  const Scenario sc = load_scenario(std::string(STRATA_SOURCE_DIR) +
                                    "/configs/scenarios/llama3-8b-torchtitan-h100.json");
  REQUIRE(sc.plan.implementation.cross_entropy == CrossEntropy::Unfused);  // the stack's
  Scenario in_place = sc;
  in_place.plan.implementation.cross_entropy = CrossEntropy::InPlace;
  const double logits = 2.0 * 8192 * 128256;
  for (const bool timeline : {false, true}) {
    CAPTURE(timeline);
    const MemoryEstimate u = timeline ? simulate_memory(sc) : estimate_memory(sc);
    const MemoryEstimate i = timeline ? simulate_memory(in_place) : estimate_memory(in_place);
    // The peak is the backward's start: nll_loss's and log_softmax's fp32
    // gradients (8 bytes per logit) where the in-place kernel holds one
    // bf16 gradient (2); everything else is the same.
    const double more = 6 * logits;
    CHECK(static_cast<double>(tag(u.stages[0], MemTag::Activations) - tag(i.stages[0], MemTag::Activations)) ==
          doctest::Approx(more).epsilon(1e-9));
    CHECK(static_cast<double>(tag(u.stages[0], MemTag::AllocatorReserve) -
                              tag(i.stages[0], MemTag::AllocatorReserve)) ==
          doctest::Approx(0.2 * more).epsilon(1e-6));
    CHECK(model_states(u.stages[0]) == model_states(i.stages[0]));
  }
}

TEST_CASE("the step graph carries every stage's buffers") {
  // 1F1B, 4 stages (dp 1), 16 microbatches, 4 layers per stage, full
  // recompute: each stage's GPU pool holds its static bytes from the start
  // and one checkpoint per layer and microbatch is allocated and freed.
  const auto sc = make("{\"layers\": 16, \"hidden\": 256, \"heads\": 4, \"seq_len\": 128, \"vocab\": 1000}",
                       "{\"preset\": \"dgx-h100\"}", "{\"global\": 16}",
                       "{\"pp\": 4, \"tp\": 2, \"recompute\": \"full\"}");
  const ModelStepCosts costs(sc);
  const auto low = lower_step(sc, costs);
  const auto run = sim::simulate(low.graph);
  for (int s = 0; s < 4; ++s) {
    const auto& pool = run.at(low.graph.pool("s" + std::to_string(s) + ".gpu"));
    CHECK(pool.end_live == pool.timeline.front().live);  // every activation freed
  }
  CHECK(low.graph.at(low.graph.buffer("s1:act/L4/mb15")).bytes == 2 * 128 * 256);  // s·b·h·2 bytes, no SP
}

TEST_CASE("activation offload: the timeline knows when PCIe cannot keep up") {
  // The analytical model assumes copies keep pace and leaves (1 + depth)
  // layers on the GPU; in the replayed step, forward produces a GPT layer's
  // activations faster than PCIe drains them, so the GPU holds more than that
  // — but never more than without offload — and the host pool holds the rest.
  const std::string dgx = "{\"preset\": \"dgx-h100\"}";
  const auto sc = make("\"gpt3-1.3b\"", dgx, "{\"global\": 16}",
                       "{\"pp\": 2, \"tp\": 2, \"offload\": {\"activations\": true, \"prefetch_depth\": 1}}");
  const auto base = make("\"gpt3-1.3b\"", dgx, "{\"global\": 16}", "{\"pp\": 2, \"tp\": 2}");
  const auto timeline = simulate_memory(sc);
  const auto analytical = estimate_memory(sc);
  const auto none = simulate_memory(base);
  CHECK(timeline.source == "timeline");
  const Bytes t = tag(timeline.stages[0], MemTag::Activations);
  CHECK(t > tag(analytical.stages[0], MemTag::Activations));
  CHECK(t <= tag(none.stages[0], MemTag::Activations));
  CHECK(timeline.stages[0].host_bytes > 0);
  CHECK(timeline.stages[0].host_bytes <= analytical.stages[0].host_bytes);
}

TEST_CASE("Llama 3 405B's layout: the embedding and the output layer in chunks of their own") {
  // 126 layers over pp 16 with 8 virtual stages (128 chunks), the first
  // chunk holding only the embedding and the last only the output layer
  // and loss (Dubey et al. 2024, Sec. 3.3.2; the layout embedding_head_as_layers
  // gives). Stage 0 holds 7 blocks and the embedding, stages 1-14 8 blocks,
  // stage 15 7 blocks and the head, so the first and last stages are the
  // light ones, by one block less its embedding or head, in parameters and
  // in activations; the timeline and the analytical model agree.
  const std::string plan = R"({"dp": 64, "tp": 8, "pp": 16, "schedule": "interleaved", "virtual_stages": 8,
      "sequence_parallel": true, "recompute": "full", "zero": 1, "pipeline_layout": "embedding_head_as_layers"})";
  const Scenario sc = make("\"llama3-405b\"", R"({"preset": "dgx-h100", "nodes": 1024})",
                           R"({"global": 2048, "micro": 1})", plan);
  const auto chunks = chunk_layers(sc.plan, sc.model.layers);
  REQUIRE(chunks.size() == 128);
  CHECK(chunks.front() == 0);
  CHECK(chunks.back() == 0);
  const cost::OpChain chain = cost::expand(sc.model, {.micro_batch = 1, .tp = 8, .sequence_parallel = true});
  const MemoryEstimate a = estimate_memory(sc);
  const MemoryEstimate t = simulate_memory(sc);
  REQUIRE(t.stages.size() == 16);
  const std::int64_t block = chain.main_block().params();
  CHECK(t.stages[0].params == 7 * block + chain.embedding.params());
  for (int s = 1; s < 15; ++s) CHECK(t.stages[static_cast<std::size_t>(s)].params == 8 * block);
  CHECK(t.stages[15].params == 7 * block + chain.head.params());
  CHECK(t.stages[0].total < t.stages[1].total);
  CHECK(t.stages[15].total < t.stages[14].total);
  for (std::size_t s = 0; s < 16; ++s) {
    CAPTURE(s);
    CHECK(a.stages[s].params == t.stages[s].params);
    // The analytical model pairs the blocks' peak with the embedding's
    // token ids of the microbatches then in flight through chunk 0; with
    // no blocks in chunk 0 the timeline's peak comes when one of them has
    // already gone back: at most one microbatch's ids apart, never below.
    const Bytes diff = tag(a.stages[s], MemTag::Activations) - tag(t.stages[s], MemTag::Activations);
    CHECK(diff >= 0);
    CHECK(diff <= (s == 0 ? chain.embedding.saved_bytes() : 0));
  }
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("the caching allocator's replay: each stage's declared tensors, reported beside the rule") {
  // gpt3-1.3b over a 2-stage 1F1B pipeline, tp 2, without recompute: the
  // replay runs the layer level's allocations of each stage's GPU pool, so
  // its allocated peak is the timeline's peak less what is outside the
  // allocator (the runtime) — the same sequence of allocations and frees —,
  // and what it reserves is at least that. The AllocatorReserve tag keeps
  // the rule (20 % of the transient bytes at the peak).
  const std::string dgx = "{\"preset\": \"dgx-h100\"}";
  std::vector<Bytes> reserved;
  for (const char* mode : {"native", "expandable_segments"}) {
    CAPTURE(mode);
    const auto sc = make("\"gpt3-1.3b\"", dgx, "{\"global\": 16, \"micro\": 2}",
                         std::string("{\"pp\": 2, \"tp\": 2, \"implementation\": {\"allocator\": \"") + mode + "\"}}");
    CHECK(enum_name(sc.plan.implementation.allocator) == mode);
    const MemoryEstimate m = simulate_memory(sc);
    REQUIRE(m.stages.size() == 2);
    for (const StageMemory& st : m.stages) {
      REQUIRE(st.allocator);
      const double transient = static_cast<double>(tag(st, MemTag::Activations) + tag(st, MemTag::CommBuffers) +
                                                   tag(st, MemTag::Workspace));
      CHECK(tag(st, MemTag::AllocatorReserve) == std::llround(0.2 * transient));
      CHECK(st.allocator->allocated_peak ==
            st.total - tag(st, MemTag::AllocatorReserve) - tag(st, MemTag::Runtime));
      CHECK(st.allocator->reserved_peak >= st.allocator->allocated_peak);
      CHECK(st.allocator->steps >= 2);
      CHECK(st.allocator->overflow == 0);
    }
    reserved.push_back(m.stages[0].allocator->reserved_peak);
    // memory_figures names the peak's parts.
    const MemoryFigures f = memory_figures(m);
    CHECK(f.reserved == m.peak_bytes - m.breakdown[static_cast<std::size_t>(MemTag::Runtime)]);
    CHECK(f.allocated == f.reserved - m.breakdown[static_cast<std::size_t>(MemTag::AllocatorReserve)]);
  }
  // The mode reaches the replay: natively the freed blocks that cannot serve
  // a larger tensor stay cached beside new segments (229 MiB beyond the
  // tensors on stage 0); expandable segments grow into a free end instead
  // (15 MiB).
  CHECK(reserved[1] < reserved[0]);
  // The analytical estimate and the chunk level do not replay it.
  const auto sc = make("\"gpt3-1.3b\"", dgx, "{\"global\": 16, \"micro\": 2}", "{\"pp\": 2, \"tp\": 2}");
  CHECK(!estimate_memory(sc).stages[0].allocator);
}

TEST_CASE("a layer's saved activations reach the allocator op by op") {
  // Without recompute every layer's Act buffer is its ops' saved tensors
  // (Layer::saved_tensors(None), in forward order; they add up to the
  // buffer); with full recompute a layer keeps its input alone, one tensor,
  // and reruns from it: its Recomputed buffer, the saved tensors less that
  // shared input, is left one tensor. With every_k (k = 2) the second
  // layer of each segment reruns whole, split as a kept layer's.
  const auto sc = make("\"gpt3-1.3b\"", "{\"preset\": \"dgx-h100\"}", "{\"global\": 8, \"micro\": 1}", "{\"dp\": 8}");
  const cost::OpChain chain = cost::expand(sc.model, expand_options(sc));
  const std::vector<Bytes> want = chain.block_at(0).saved_tensors(Recompute::None);
  REQUIRE(want.size() > 2);
  for (const char* recompute : {"none", "full", "every_k"}) {
    CAPTURE(recompute);
    const auto s = make("\"gpt3-1.3b\"", "{\"preset\": \"dgx-h100\"}", "{\"global\": 8, \"micro\": 1}",
                        std::string("{\"dp\": 8, ") + (std::string(recompute) == "every_k" ? "\"recompute_k\": 2, " : "") +
                            "\"recompute\": \"" + recompute + "\"}");
    const StepProgram p = build_step_program(s, ModelStepCosts(s), Granularity::Layer);
    std::size_t split = 0, act = 0, rerun = 0;
    for (const auto& sp : p.splits) {
      const ProgramBuffer& b = p.buffers[static_cast<std::size_t>(sp.buffer)];
      CHECK((b.kind == BufKind::Act || b.kind == BufKind::Recomputed));
      const std::vector<Bytes> got(p.tensors.begin() + sp.first, p.tensors.begin() + sp.first + sp.count);
      CHECK(got == want);
      ++split;
    }
    for (const auto& b : p.buffers) {
      act += b.kind == BufKind::Act && b.layer >= 0;
      rerun += b.kind == BufKind::Recomputed;
    }
    const std::string policy = recompute;
    CHECK(split == (policy == "none" ? act : policy == "full" ? 0 : rerun / 2));
    if (policy != "full") CHECK(split == static_cast<std::size_t>(policy == "none" ? 24 : 12));
  }
}

}  // namespace
}  // namespace strata::strategies

namespace strata::strategies {
namespace {

TEST_CASE("a layer chain's activations, in closed form, analytical and replayed") {
  // Input 100 B a sample; a (output 200, saved 50, workspace 30), then b
  // twice (output 200): with a microbatch of 4 and nothing recomputed each
  // stage keeps its input and saved tensors, 4·150 + 4·200 + 4·200 =
  // 2,200 B, and the last stage's backward holds its output's gradient,
  // 4·200 = 800 B (a's 920 B come when b's 1,600 B are freed): 3,000 B at
  // the peak, in the analytical model and the replayed step alike. Under
  // full recompute the two agree too (what they count is the GPU rule's:
  // docs/memory-model.md).
  const std::string chain =
      R"({"name": "toy", "chain": {"input_bytes": 100, "layers": [
           {"name": "a", "fwd_flops": 1e9, "params": 10, "output_bytes": 200, "saved_bytes": 50, "workspace_bytes": 30},
           {"repeat": 2, "layers": [{"name": "b", "fwd_flops": 4e9, "params": 5, "output_bytes": 200}]}]}})";
  const std::string one = R"({"gpu": {"preset": "a100-80g"}, "gpus_per_node": 1})";
  auto activations = [&](const char* recompute, bool timeline) {
    const auto sc = make(chain, one, R"({"global": 4, "micro": 4})",
                         std::string(R"({"precision": "fp32", "recompute": ")") + recompute + "\"}");
    return tag((timeline ? simulate_memory(sc) : estimate_memory(sc)).stages[0], MemTag::Activations);
  };
  CHECK(activations("none", false) == 3000);
  CHECK(activations("none", true) == 3000);
  CHECK(activations("full", true) == activations("full", false));
}

}  // namespace
}  // namespace strata::strategies
