#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "sim/error.hpp"
#include "strategies/scenario.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "s.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A valid GPT-3 175B scenario (the input contract's example) with
// replacements applied to its text, in order.
std::string scenario(std::initializer_list<std::pair<std::string, std::string>> edits = {}) {
  std::string s = R"({
  "model":   "gpt3-175b",
  "cluster": {"preset": "dgx-a100-80g", "nodes": 128},
  "batch":   {"global": 1536, "micro": 1},
  "plan":    {"dp": 16, "tp": 8, "pp": 8, "cp": 1, "ep": 1, "zero": 1,
              "schedule": "interleaved", "virtual_stages": 3, "sequence_parallel": true,
              "recompute": "selective", "offload": {"activations": false,
              "weights": false, "optimizer": "none"}, "compression": {"method": "none"},
              "optimizer": "adam", "precision": "bf16",
              "implementation": {"attention": "flash", "fused_elementwise": true,
                "overlap_grad_reduce": true, "overlap_param_gather": true,
                "tp_comm_overlap": "none", "pp_scatter_gather": false}}
})";
  for (const auto& [from, to] : edits) {
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
  }
  return s;
}
std::string scenario(const std::string& from, const std::string& to) {
  return scenario({{from, to}});
}

TEST_CASE("the input contract's example parses") {
  const auto s = parse_scenario(scenario(), "s.json");
  CHECK(s.model.layers == 96);
  CHECK(s.cluster.gpus() == 1024);
  CHECK(s.plan.dp == 16);
  CHECK(s.plan.schedule == Schedule::Interleaved);
  CHECK(s.plan.virtual_stages == 3);
  CHECK(s.plan.recompute == Recompute::Selective);
  CHECK(microbatches(s.plan, s.batch) == 96);  // 1536 / (16 · 1)
}

TEST_CASE("defaults: dp fills the cluster, 1f1b, no recompute, bf16 adam") {
  const auto s = parse_scenario(R"({"model": "gpt2-124m", "cluster": {"preset": "dgx-h100", "nodes": 2},
                                    "batch": {"global": 64}, "plan": {"tp": 2}})",
                                "s.json");
  CHECK(s.plan.dp == 8);  // 16 GPUs / tp 2
  CHECK(s.batch.micro == 1);
  CHECK(s.plan.schedule == Schedule::OneFOneB);
  CHECK(s.plan.virtual_stages == 1);
  CHECK(s.plan.precision == Precision::BF16);
  CHECK(s.plan.optimizer == Optimizer::Adam);
  CHECK(s.plan.implementation.attention == AttentionKernel::Flash);
  CHECK(s.plan.implementation.rank_order[0] == ParallelDim::TP);
}

TEST_CASE("balanced chunks differ by at most one layer") {
  // 50 layers over 8 chunks: 6 each, the 2 extra in the middle.
  Plan p;
  p.pp = 8;
  const auto c = chunk_layers(p, 50);
  CHECK(c == std::vector<std::int64_t>{6, 6, 6, 7, 7, 6, 6, 6});
}

TEST_CASE("invalid combinations name the rule") {
  // A 16-bit gradient reduction is the plan's own 16-bit dtype.
  CHECK(error_of(scenario("\"pp_scatter_gather\": false", "\"pp_scatter_gather\": false, \"grad_reduce_dtype\": \"fp16\"")) ==
        "s.json: plan.implementation.grad_reduce_dtype: a 16-bit reduction is the plan's own 16-bit dtype: fp16 "
        "under fp16, bf16 under bf16, fp8 and fp4; precision is bf16 (use \"fp32\" or \"accumulation\")");
  CHECK(error_of(scenario({{"\"pp_scatter_gather\": false", "\"pp_scatter_gather\": false, \"grad_reduce_dtype\": \"bf16\""},
                           {"\"precision\": \"bf16\"", "\"precision\": \"fp32\""}})) ==
        "s.json: plan.implementation.grad_reduce_dtype: a 16-bit reduction is the plan's own 16-bit dtype: fp16 "
        "under fp16, bf16 under bf16, fp8 and fp4; precision is fp32 (use \"fp32\" or \"accumulation\")");
  CHECK(error_of(scenario("\"pp_scatter_gather\": false", "\"pp_scatter_gather\": false, \"grad_reduce_dtype\": \"bf16\"")) ==
        "no error");
  CHECK(error_of(scenario("\"pp_scatter_gather\": false", "\"pp_scatter_gather\": false, \"grad_reduce_dtype\": \"int8\"")) !=
        "no error");
  CHECK(error_of(scenario("\"tp\": 8", "\"tp\": 3")) ==
        "s.json: plan: dp·tp·pp·cp = 16·3·8·1 = 384 does not equal the cluster's 1024 GPUs "
        "(128 nodes × 8)");
  CHECK(error_of(scenario("\"dp\": 16, \"tp\": 8", "\"dp\": 2, \"tp\": 64")) ==
        "s.json: plan.tp: 64 does not divide heads=96");
  CHECK(error_of(scenario({{"\"dp\": 16, \"tp\": 8", "\"dp\": 128, \"tp\": 1"},
                           {"\"global\": 1536", "\"global\": 1024"}})) ==
        "s.json: plan.sequence_parallel: sequence parallelism needs tp > 1");
  CHECK(error_of(scenario("\"virtual_stages\": 3", "\"virtual_stages\": 1")) ==
        "s.json: plan.virtual_stages: the interleaved schedule needs virtual_stages >= 2");
  CHECK(error_of(scenario("\"schedule\": \"interleaved\"", "\"schedule\": \"1f1b\"")) ==
        "s.json: plan.virtual_stages: virtual_stages = 3 needs schedule \"interleaved\"");
  CHECK(error_of(scenario("\"virtual_stages\": 3", "\"virtual_stages\": 13")) ==
        "s.json: plan.pp: pp·virtual_stages = 104 pipeline chunks exceed layers=96 (each chunk "
        "needs at least one layer)");
  CHECK(error_of(scenario("\"global\": 1536", "\"global\": 1000")) ==
        "s.json: batch.global: 1000 is not divisible by dp·micro = 16·1 = 16");
  CHECK(error_of(scenario({{"\"zero\": 1", "\"zero\": 2"},
                           {"{\"method\": \"none\"}", "{\"method\": \"topk\", \"ratio\": 0.01}"}})) ==
        "s.json: plan.compression.method: topk sends index/value pairs that need an all-gather; "
        "ZeRO-2 reduce-scatters gradients instead (use zero <= 1)");
  CHECK(error_of(scenario("\"ep\": 1", "\"ep\": 2")) ==
        "s.json: plan.ep: expert parallelism needs a mixture-of-experts model");
  CHECK(error_of(scenario({{"\"model\":   \"gpt3-175b\"", "\"model\": {\"preset\": \"gpt3-175b\", \"seq_len\": 2050}"},
                           {"\"dp\": 16", "\"dp\": 8"},
                           {"\"cp\": 1", "\"cp\": 2"},
                           {"\"global\": 1536", "\"global\": 1024"},
                           {"\"sequence_parallel\": true", "\"sequence_parallel\": false"}})) ==
        "s.json: plan.cp: 2·cp = 4 does not divide seq_len=2050 (ring attention splits the "
        "sequence into 2·cp balanced chunks)");
  CHECK(error_of(scenario("\"precision\": \"bf16\"", "\"precision\": \"fp8\"")) ==
        "s.json: plan.precision: fp8 is not supported by a100-80g (no fp8 peak)");
  CHECK(error_of(scenario("\"activations\": false", "\"activations\": false, \"planner\": \"vdnn\"")) ==
        "s.json: plan.offload.planner: an offload planner needs offload.activations = true");
}

TEST_CASE("stage_layers must list every chunk and sum to the layers") {
  const std::string base = scenario("\"schedule\": \"interleaved\", \"virtual_stages\": 3",
                                    "\"schedule\": \"1f1b\", \"stage_layers\": LAYERS");
  auto with = [&](const std::string& layers) {
    std::string s = base;
    s.replace(s.find("LAYERS"), 6, layers);
    return error_of(s);
  };
  CHECK(with("[12, 12, 12, 12, 12, 12, 12, 12]") == "no error");
  CHECK(with("[12, 12]") ==
        "s.json: plan.stage_layers: has 2 entries; needs pp·virtual_stages = 8");
  CHECK(with("[12, 12, 12, 12, 12, 12, 12, 11]") ==
        "s.json: plan.stage_layers: sums to 95; must equal layers=96");
  CHECK(with("[12, 12, 12, 0, 12, 12, 12, 12]") ==
        "s.json: plan.stage_layers[3]: is 0: only the first chunk (the embedding alone) and the last "
        "(the output layer and loss alone) may hold no transformer layer");
  // The first chunk may hold the embedding alone, the last the head alone.
  CHECK(with("[0, 16, 16, 16, 16, 16, 16, 0]") == "no error");
  CHECK(with("[-1, 16, 16, 16, 16, 16, 16, 1]") == "s.json: plan.stage_layers[0]: must be in [0, 100000], got -1");
}

TEST_CASE("pipeline_layout: the embedding and the head counted as layers") {
  // 96 layers + 2 over 8 chunks: 12 units each, 2 left for the middle
  // chunks 3 and 4; the first and last give one unit to the embedding and
  // the head.
  Plan p;
  p.pp = 8;
  CHECK(chunk_layers(p, 96) == std::vector<std::int64_t>(8, 12));
  p.pipeline_layout = PipelineLayout::EmbeddingHeadAsLayers;
  CHECK(chunk_layers(p, 96) == std::vector<std::int64_t>{11, 12, 12, 13, 13, 12, 12, 11});
  // Llama 3 405B's published layout: 126 layers over pp 16 with v 8, the
  // first chunk the embedding alone, the last the output layer and loss.
  p.pp = 16;
  p.virtual_stages = 8;
  std::vector<std::int64_t> llama(128, 1);
  llama.front() = llama.back() = 0;
  CHECK(chunk_layers(p, 126) == llama);
  // One chunk holds everything.
  p.pp = p.virtual_stages = 1;
  CHECK(chunk_layers(p, 96) == std::vector<std::int64_t>{96});

  const std::string base = scenario("\"schedule\": \"interleaved\", \"virtual_stages\": 3",
                                    "\"schedule\": \"interleaved\", \"virtual_stages\": V, \"pipeline_layout\": L");
  auto with = [&](const std::string& v, const std::string& layout) {
    std::string s = base;
    s.replace(s.find("V,"), 1, v);
    s.replace(s.find(": L"), 3, ": " + layout);
    return error_of(s);
  };
  // pp 8: 98 chunks hold 96 layers, the embedding and the head; 104 cannot.
  CHECK(with("12", "\"embedding_head_as_layers\"") == "no error");
  CHECK(with("13", "\"embedding_head_as_layers\"") ==
        "s.json: plan.pp: pp·virtual_stages = 104 pipeline chunks exceed layers=96 + 2 (the embedding and "
        "the head count as layers; each chunk needs one)");
  CHECK(with("13", "\"balanced\"") ==
        "s.json: plan.pp: pp·virtual_stages = 104 pipeline chunks exceed layers=96 (each chunk needs at "
        "least one layer)");
  CHECK(with("3", "\"sideways\"").find("plan.pipeline_layout") != std::string::npos);
}

TEST_CASE("offload.weights: true, false, or where: cpu or nvme; NVMe needs a disk and a host step") {
  auto plan_of = [](const std::string& weights, const std::string& optimizer) {
    return parse_scenario(scenario({{"\"weights\": false", "\"weights\": " + weights},
                                    {"\"optimizer\": \"none\"", "\"optimizer\": " + optimizer}}),
                          "s.json");
  };
  const auto nvme = plan_of("\"nvme\"", "\"cpu\"");
  CHECK(nvme.plan.offload.weights);
  CHECK(nvme.plan.offload.weights_target == OffloadTarget::Nvme);
  CHECK(plan_of("\"cpu\"", "\"cpu\"").plan.offload.weights_target == OffloadTarget::Cpu);
  CHECK(plan_of("true", "\"cpu\"").plan.offload.weights_target == OffloadTarget::Cpu);
  CHECK(!plan_of("\"none\"", "\"cpu\"").plan.offload.weights);
  CHECK_NOTHROW(require_valid_plan(nvme));
  CHECK(error_of(scenario("\"weights\": false", "\"weights\": \"gpu\"")) ==
        "s.json: plan.offload.weights: must be one of none|cpu|nvme (got \"gpu\")");
  // A GPU step would need the weights resident: ZeRO-Infinity steps them on the host.
  auto rule = [](const Scenario& sc) {
    try {
      require_valid_plan(sc);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("valid");
  };
  CHECK(error_of(scenario({{"\"weights\": false", "\"weights\": \"nvme\""}})) ==
        "s.json: plan.offload.weights: weights on NVMe are stepped on the host: set offload.optimizer to cpu or "
        "nvme");
  auto diskless = nvme;
  diskless.cluster.node.nvme_GiB = 0;
  CHECK(rule(diskless).find("plan.offload.weights: offload to NVMe needs a cluster with nvme_GiB > 0") !=
        std::string::npos);
}

// "valid", or the message of the first rule the scenario's plan breaks.
std::string rule(const std::string& text) {
  try {
    require_valid_plan(parse_scenario(text, "s.json"));
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("valid");
}

TEST_CASE("recompute_modules: Megatron-Core's list under selective, checked, in the plan's id when not the default") {
  const auto with = [](const std::string& mods) {
    return scenario("\"recompute\": \"selective\"", "\"recompute\": \"selective\", \"recompute_modules\": " + mods);
  };
  const Scenario s = parse_scenario(with(R"(["layernorm", "core_attn"])"), "s.json");
  CHECK(s.plan.recompute_modules ==
        (cost::module_bit(cost::RecomputeModule::CoreAttn) | cost::module_bit(cost::RecomputeModule::Layernorm)));
  // In the canonical JSON (the plan's id) in the modules' order; the
  // default (the attention core alone) stays out, so older ids hold.
  CHECK(canonical_json(s.plan, s.batch).find(R"("recompute_modules":["core_attn","layernorm"])") != std::string::npos);
  const Scenario plain = parse_scenario(with(R"(["core_attn"])"), "s.json");
  CHECK(canonical_json(plain.plan, plain.batch) == canonical_json(parse_scenario(scenario(), "s.json").plan,
                                                                  plain.batch));
  // Bad lists, each named.
  CHECK(error_of(scenario("\"recompute\": \"selective\"", "\"recompute\": \"full\", \"recompute_modules\": [\"layernorm\"]")) ==
        "s.json: plan.recompute_modules: applies only to recompute \"selective\" (Megatron-Core's recompute_modules)");
  CHECK(error_of(with("[]")) == "s.json: plan.recompute_modules: lists no module: recompute \"none\" reruns nothing");
  CHECK(error_of(with(R"(["layernorm", "layernorm"])")) == "s.json: plan.recompute_modules[1]: is listed twice");
  CHECK(error_of(with(R"(["norm"])")).find("plan.recompute_modules[0]: must be one of core_attn|layernorm|") !=
        std::string::npos);
  // GPT-3 has neither latent attention nor experts; whole-module reruns
  // repeat communication Strata does not price.
  CHECK(rule(with(R"(["mla_up_proj"])")) ==
        "s.json: plan.recompute_modules: mla_up_proj reruns multi-head latent attention's up-projections; "
        "gpt3-175b has none");
  CHECK(rule(with(R"(["moe_act"])")) ==
        "s.json: plan.recompute_modules: moe_act reruns the routed experts' activation; gpt3-175b has no experts");
  CHECK(rule(with(R"(["core_attn", "moe"])")).find("plan.recompute_modules: \"moe\" checkpoints a whole submodule") !=
        std::string::npos);
  // mlp is priced at tp 1 (the scenario's tp 8 would rerun its reduction).
  CHECK(rule(with(R"(["core_attn", "mlp"])")).find("plan.recompute_modules: \"mlp\" reruns the MLP with its "
                                                     "tensor-parallel reduction") != std::string::npos);
  CHECK(rule(with(R"(["core_attn", "layernorm"])")) == "valid");
}

TEST_CASE("optimizer_states: bf16 statistics where the optimizer keeps fp32 ones, in the plan's id when set") {
  const Scenario s = parse_scenario(scenario("\"optimizer\": \"adam\"", "\"optimizer\": \"adam\", \"optimizer_states\": \"bf16\""),
                                    "s.json");
  CHECK(s.plan.optimizer_states == StateDtype::BF16);
  CHECK(canonical_json(s.plan, s.batch).find(R"("optimizer_states":"bf16")") != std::string::npos);
  const Scenario plain = parse_scenario(scenario(), "s.json");
  CHECK(canonical_json(plain.plan, plain.batch).find("optimizer_states") == std::string::npos);
  CHECK(rule(scenario("\"optimizer\": \"adam\"", "\"optimizer\": \"adam8bit\", \"optimizer_states\": \"bf16\"")) ==
        "s.json: plan.optimizer_states: adam8bit keeps its statistics in its own format (quantized or factored); "
        "bf16 statistics apply to adam, adamw, lamb, momentum and lars");
  CHECK(error_of(scenario("\"optimizer\": \"adam\"", "\"optimizer\": \"adam\", \"optimizer_states\": \"fp16\"")) ==
        "s.json: plan.optimizer_states: must be one of fp32|bf16 (got \"fp16\")");
}

TEST_CASE("keys that apply to other choices are rejected, not ignored") {
  CHECK(error_of(scenario("\"recompute\": \"selective\"", "\"recompute\": \"selective\", \"recompute_k\": 2")) ==
        "s.json: plan.recompute_k: applies only to recompute \"every_k\" and \"every_nth\"");
  CHECK(error_of(scenario("{\"method\": \"none\"}", "{\"method\": \"qsgd\", \"rank\": 4}")) ==
        "s.json: plan.compression.rank: applies only to method powersgd, not \"qsgd\"");
  CHECK(error_of(scenario("\"optimizer\": \"none\"", "\"optimizer\": \"disk\"")) ==
        "s.json: plan.offload.optimizer: must be one of none|cpu|nvme (got \"disk\")");
  CHECK(error_of(scenario("\"pp_scatter_gather\": false", "\"pp_scatter_gather\": false, \"rank_order\": \"tp-dp-dp-pp\"")) ==
        "s.json: plan.implementation.rank_order: must be a permutation of tp, cp, dp, pp "
        "(innermost first); \"dp\" appears twice");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"tokens\": 1e9, \"target_loss\": 2.0}, \"plan\":")) ==
        "s.json: goal: needs exactly one of \"tokens\" or \"target_loss\"");
  CHECK(error_of(scenario("\"plan\":", "\"plna\": 1, \"plan\":")) ==
        "s.json: plna: unknown key (did you mean \"plan\"?)");
}


TEST_CASE("a goal brings the bundled convergence model; convergence and lr override it") {
  // Without "convergence" the bundled default is used; a target loss it
  // cannot move to, and keys that need a goal, are errors naming the path.
  const auto s = parse_scenario(scenario("\"plan\":", "\"goal\": {\"target_loss\": 2.5}, \"plan\":"), "s.json");
  REQUIRE(s.convergence);
  CHECK(s.convergence->file == "configs/convergence/default.json");
  CHECK_FALSE(s.lr.has_value());
  const auto g = estimate_goal(s);
  REQUIRE(g);
  // B = 1536 · 2048 tokens; S = S_min (1 + B_noise / B), rounded up.
  const double b = 1536.0 * 2048.0;
  CHECK(g->steps == static_cast<std::int64_t>(std::ceil(
                        s.convergence->s_min_steps.value * (1 + s.convergence->b_noise_tokens.value / b))));
  CHECK_FALSE(estimate_goal(parse_scenario(scenario(), "s.json")).has_value());

  const auto o = parse_scenario(
      scenario("\"plan\":", "\"goal\": {\"target_loss\": 2.5}, \"convergence\": {\"S_min_steps\": 100, "
                            "\"B_noise_tokens\": 0}, \"lr\": {\"base\": 6e-5, \"warmup_steps\": 375}, \"plan\":"),
      "s.json");
  CHECK(o.convergence->s_min_steps.value == 100);
  CHECK(o.convergence->s_min_steps.source == "given in s.json (convergence.S_min_steps)");
  CHECK(o.convergence->optimizer.at(Optimizer::Adam8bit).factor ==
        s.convergence->optimizer.at(Optimizer::Adam8bit).factor);
  REQUIRE(o.lr);
  CHECK(o.lr->scaling == LrScaling::Linear);
  CHECK(estimate_goal(o)->steps == 100 + 375);
  // The rule's reference is the scenario's batch: a point of explore's batch
  // axis at twice it gets twice the rate (r = 2 with B_noise 0: never reached).
  CHECK(o.lr->reference_batch == 1536);
  auto point = o;
  point.batch.global = 3072;
  const auto far = estimate_goal(point);
  CHECK(*far->lr == doctest::Approx(1.2e-4));
  CHECK_FALSE(far->reachable);

  CHECK(error_of(scenario("\"plan\":", "\"lr\": {\"base\": 1e-4}, \"plan\":")) ==
        "s.json: lr: applies only with a \"goal\"");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"tokens\": 1e9}, \"lr\": {\"base\": 1e-4, \"scaling\": \"cubic\"}, \"plan\":")) ==
        "s.json: lr.scaling: must be one of linear|sqrt|none (got \"cubic\")");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"tokens\": 1e9}, \"convergence\": \"nothere.json\", \"plan\":")) ==
        "s.json: convergence: convergence file \"nothere.json\" not found");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"tokens\": 1e9}, \"convergence\": \"defualt\", \"plan\":")) ==
        "s.json: convergence: unknown convergence preset \"defualt\" (known: cpu-tiny, default)");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"tokens\": 1e9}, \"convergence\": {\"S_min_step\": 1}, \"plan\":")) ==
        "s.json: convergence.S_min_step: unknown key (did you mean \"S_min_steps\"?)");
  CHECK(error_of(scenario("\"plan\":", "\"goal\": {\"target_loss\": 2.0}, \"plan\":")) ==
        "s.json: goal.target_loss: a target loss of 2 is not above the loss floor 2.329: it is never "
        "reached (convergence model configs/convergence/default.json)");
}

TEST_CASE("absurd sizes are input errors naming the limit, not wrapped numbers") {
  // Degrees of 2^20 each: their product (2^80) does not fit in 64 bits.
  const std::string gpt2 = R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 8}, )";
  CHECK(error_of(gpt2 + R"("plan": {"dp": 1048576, "tp": 1048576, "pp": 1048576, "cp": 1048576}})") ==
        "s.json: plan: dp·tp·pp·cp = 1048576·1048576·1048576·1048576 = more than 2^63 does not "
        "equal the cluster's 1 GPUs (1 nodes × 1)");
  CHECK(error_of(gpt2 + R"("plan": {"tp": 16777216}})") ==
        "s.json: plan.tp: must be in [1, 1048576], got 16777216");
  // 10^9 GPUs: 10^6 nodes of 1000.
  CHECK(error_of(R"({"model": "gpt2-124m", "batch": {"global": 8},
                     "cluster": {"preset": "dgx-a100-80g", "nodes": 1000000, "gpus_per_node": 1000}})") ==
        "s.json: cluster.nodes: nodes × gpus_per_node = 1000000 × 1000 = 1000000000 GPUs; Strata "
        "models at most 2^20 (1,048,576)");
  // 2^30 sequences of 2^14 tokens: 2^44 tokens per step.
  CHECK(error_of(R"({"model": {"preset": "gpt2-124m", "seq_len": 16384}, "cluster": "1xa100-80g",
                     "batch": {"global": 1073741824}})") ==
        "s.json: batch.global: global × seq_len = 1073741824 × 16384 tokens per step; Strata "
        "models at most 2^40 (1,099,511,627,776)");
  // 2^40 tokens (the most allowed) of a model with a vocabulary of 2^24.
  CHECK(error_of(R"({"model": {"preset": "gpt2-124m", "vocab": 16777216, "seq_len": 65536}, "cluster": "1xa100-80g",
                     "batch": {"global": 16777216, "micro": 4096}, "plan": {"dp": 1}})") ==
        "s.json: batch: needs about 2.38e+21 bytes (2.59e+10 parameters, 2.38e+21 bytes of "
        "activations for 4096 microbatches of 4096 × 65536 tokens, flash attention); Strata "
        "counts at most 2^60 bytes (1 EiB)");
  // A model that does not fit in 2^60 bytes on its own (read before the batch).
  CHECK(error_of(R"({"model": {"preset": "gpt2-124m", "layers": 100000, "hidden": 16777216, "heads": 16},
                     "cluster": "1xa100-80g", "batch": {"global": 8}})") ==
        "s.json: model: needs about 1.44e+22 bytes (4.5e+20 parameters, 3.08e+18 bytes of "
        "activations for one sequence); Strata counts at most 2^60 bytes (1 EiB)");
  // 2^20 microbatches of one sequence × (12 layers + 2): 14 · 2^20 layer passes.
  CHECK(error_of(R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 1048576}})") ==
        "s.json: batch.global: 1048576 microbatches per pipeline × (12 layers + embedding and "
        "head) = 14680064 layer passes per step; Strata simulates at most 2^20 (1,048,576): "
        "raise batch.micro or dp, or lower batch.global");
}

TEST_CASE("a space's template is checked for the sizes it is read with") {
  CHECK(error_of(R"({"model": {"preset": "gpt2-124m", "seq_len": 16384}, "cluster": "1xa100-80g",
                     "batch": {"global": 1073741824}, "space": {"zero": [0, 1]}})") ==
        "s.json: batch.global: global × seq_len = 1073741824 × 16384 tokens per step; Strata "
        "models at most 2^40 (1,099,511,627,776)");
  // Its points are checked by the explorer with their own batch (first_violation).
  const auto sc = parse_scenario(R"({"model": "gpt2-124m", "cluster": "1xa100-80g",
                                     "batch": {"global": 8}, "space": {"batch.global": [8, 1048576]}})",
                                 "s.json");
  Scenario big = sc;
  big.batch.global = 1048576;
  REQUIRE(first_violation(big));
  CHECK(first_violation(big)->rule == "step-size");
}

TEST_CASE("the vdnn planner is refused with selective_op: the linear layers' inputs are not what it keeps") {
  // vDNN moves each layer's linear-layer inputs; torchtitan's op-level
  // policy keeps its save list's outputs instead, so there is nothing of
  // that kind to move. Planner "all" moves what the layer keeps.
  auto with = [](const char* planner) {
    return parse_scenario(std::string(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100"},
        "batch": {"global": 8, "micro": 1}, "plan": {"recompute": "selective_op",
        "offload": {"activations": true, "planner": ")") + planner + R"("}}})",
                          "t.json");
  };
  std::string message;
  try {
    with("vdnn");
  } catch (const InputError& e) {
    message = e.what();
  }
  CHECK(message.rfind("t.json: plan.offload.planner: the vdnn planner moves each layer's linear-layer inputs", 0) == 0);
  CHECK_FALSE(first_violation(with("all")));
}

TEST_CASE("a scenario lists the files it read: model (and the file it names), cluster, stack, convergence") {
  // Outputs are checked against these (app's scenario_inputs): a trace
  // written over the model file would break the scenario.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata-files-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  auto write = [&](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  write(dir / "base.json", R"({"preset": "gpt2-124m"})");
  write(dir / "sub" / "model.json", R"({"file": "../base.json", "layers": 4})");
  write(dir / "cluster.json", R"({"preset": "dgx-a100-80g"})");
  fs::copy_file(std::string(STRATA_SOURCE_DIR) + "/configs/convergence/default.json", dir / "conv.json");
  const std::string stack = std::string(STRATA_SOURCE_DIR) + "/configs/stacks/torchtitan.json";
  write(dir / "s.json", R"({"model": "sub/model.json", "cluster": {"file": "cluster.json"},
      "batch": {"global": 8, "micro": 1}, "plan": {"zero": 3}, "stack": ")" + stack + R"(",
      "goal": {"tokens": 1e9}, "convergence": "conv.json"})");
  Scenario sc;
  std::string error;
  try {
    sc = load_scenario((dir / "s.json").string());
  } catch (const InputError& e) {
    error = e.what();
  }
  REQUIRE_MESSAGE(error.empty(), error);
  std::vector<std::string> names;
  for (const auto& f : sc.files) names.push_back(fs::path(f).lexically_normal().filename().string());
  CHECK(names == std::vector<std::string>{"model.json", "base.json", "cluster.json", stack.substr(stack.rfind('/') + 1),
                                          "conv.json"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::strategies
