// Plan export: every flag, key and value is asserted by its exact name, the
// name the engine documents. The names were checked against:
// - Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM, commit
//   000c4ac24f61): --tensor-model-parallel-size, --pipeline-model-parallel-size,
//   --context-parallel-size, --expert-model-parallel-size,
//   --num-layers-per-virtual-pipeline-stage, --no-overlap-p2p-communication,
//   --sequence-parallel, --use-distributed-optimizer, --use-megatron-fsdp,
//   --data-parallel-sharding-strategy {optim_grads, optim_grads_params},
//   --overlap-grad-reduce, --overlap-param-gather, --recompute-granularity
//   {full, selective}, --recompute-method {uniform, block}, --recompute-num-layers,
//   --cpu-offloading-num-layers, --optimizer-cpu-offload,
//   --use-precision-aware-optimizer, --optimizer {adam, sgd}, --sgd-momentum,
//   --bf16, --fp16, --grad-reduce-in-bf16, --micro-batch-size,
//   --global-batch-size, --num-layers, --hidden-size, --ffn-hidden-size,
//   --num-attention-heads, --group-query-attention, --num-query-groups,
//   --seq-length, --max-position-embeddings, --swiglu, --normalization
//   {LayerNorm, RMSNorm}, --position-embedding-type {learned_absolute, rope},
//   --untie-embeddings-and-output-weights, --disable-bias-linear,
//   --attention-backend flash, --num-experts, --moe-router-topk.
// - DeepSpeed docs/_pages/config-json.md: train_batch_size,
//   train_micro_batch_size_per_gpu, gradient_accumulation_steps, bf16.enabled,
//   zero_optimization.{stage, overlap_comm, contiguous_gradients,
//   reduce_scatter, reduce_bucket_size (elements), allgather_partitions,
//   allgather_bucket_size, offload_optimizer.{device, pin_memory},
//   offload_param.{device, pin_memory}}, activation_checkpointing.{partition_activations,
//   cpu_checkpointing, contiguous_memory_optimization}, optimizer.{type, params}
//   (Adam with adam_w_mode, AdamW); deepspeed/runtime/constants.py:
//   data_types.grad_accum_dtype.
// - torchtitan torchtitan/config/job_config.py (pytorch/torchtitan, commit
//   000204a4a8bf): [parallelism] data_parallel_replicate_degree,
//   data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree,
//   pipeline_parallel_degree, pipeline_parallel_schedule, pipeline_parallel_split_points,
//   pipeline_parallel_microbatch_size, context_parallel_degree; [training]
//   local_batch_size, global_batch_size, seq_len, mixed_precision_param,
//   enable_cpu_offload; [activation_checkpoint] mode; [optimizer] name.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <random>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "report/export.hpp"
#include "report/explore.hpp"
#include "sim/error.hpp"
#include "strategies/scenario.hpp"
#include "strategies/space.hpp"
#include "lowering/layer_plan.hpp"
#include "tests/testing.hpp"

namespace strata::report {
namespace {

namespace fs = std::filesystem;
using cost::Recompute;

strategies::Scenario scenario(const std::string& text) {
  return strategies::parse_scenario(text, "test.json");
}

// GPT-3 175B on 1024 A100s as Megatron-LM trains it (Narayanan et al. 2021,
// Korthikanti et al. 2022): tp 8, pp 8 interleaved with 4 chunks per stage,
// sequence parallel, selective recompute, distributed optimizer; dp = 1024 /
// 64 = 16.
strategies::Scenario gpt3() {
  return scenario(R"({"model": "gpt3-175b", "cluster": {"preset": "dgx-a100-80g", "nodes": 128},
      "batch": {"global": 1536, "micro": 1},
      "plan": {"tp": 8, "pp": 8, "zero": 1, "schedule": "interleaved", "virtual_stages": 4,
               "sequence_parallel": true, "recompute": "selective", "optimizer": "adam",
               "precision": "bf16"}})");
}

// Llama-3-70B on 64 H100s with ZeRO-3, its optimizer state and step and its
// weights offloaded to the CPU (ZeRO-Offload / ZeRO-Infinity), tp 8, full
// recompute; dp = 64 / 8 = 8. `pp` is spliced in.
strategies::Scenario llama_zero3(int pp) {
  return scenario(R"({"model": "llama3-70b", "cluster": {"preset": "dgx-h100", "nodes": 8},
      "batch": {"global": 256, "micro": 1},
      "plan": {"tp": 8, "pp": )" + std::to_string(pp) + R"(, "zero": 3, "sequence_parallel": true,
               "recompute": "full", "optimizer": "adamw", "precision": "bf16",
               "offload": {"optimizer": "cpu", "weights": true}}})");
}

// The flags of a Megatron-LM export: comment lines dropped, one flag (with
// its value) per entry.
std::vector<std::string> flags(const Exported& e) {
  std::vector<std::string> out;
  std::istringstream in(e.text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.size() >= 2 && line.compare(line.size() - 2, 2, " \\") == 0) line.resize(line.size() - 2);
    out.push_back(line);
  }
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool has_prefix(const std::vector<std::string>& v, const std::string& prefix) {
  for (const auto& s : v)
    if (s.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The first unsupported item that starts with `prefix`, or "".
std::string unsupported(const Exported& e, const std::string& prefix) {
  for (const auto& u : e.unsupported)
    if (u.compare(0, prefix.size(), prefix) == 0) return u;
  return "";
}

TEST_CASE("megatron: GPT-3 175B, tp 8 pp 8 interleaved v 4, sequence parallel, selective") {
  const auto e = export_megatron(gpt3());
  const auto f = flags(e);
  // Parallel degrees as given; 96 layers / (8 stages · 4 chunks) = 3 layers per chunk.
  CHECK(has(f, "--tensor-model-parallel-size 8"));
  CHECK(has(f, "--pipeline-model-parallel-size 8"));
  CHECK(has(f, "--context-parallel-size 1"));
  CHECK(has(f, "--num-layers-per-virtual-pipeline-stage 3"));
  // The plan does not overlap pipeline sends (implementation.overlap_p2p
  // false), which the interleaved schedule does by default with pp > 2.
  CHECK(has(f, "--no-overlap-p2p-communication"));
  CHECK(has(f, "--sequence-parallel"));
  // ZeRO-1 is Megatron-LM's distributed optimizer; the overlaps are the plan's defaults (on).
  CHECK(has(f, "--use-distributed-optimizer"));
  CHECK_FALSE(has(f, "--use-megatron-fsdp"));
  CHECK(has(f, "--overlap-grad-reduce"));
  CHECK(has(f, "--overlap-param-gather"));
  // Selective recompute is the attention core, Megatron-LM's default
  // --recompute-modules; a method is rejected with selective granularity.
  CHECK(has(f, "--recompute-granularity selective"));
  CHECK_FALSE(has_prefix(f, "--recompute-method"));
  CHECK(has(f, "--micro-batch-size 1"));
  CHECK(has(f, "--global-batch-size 1536"));
  CHECK(has(f, "--bf16"));
  // 16-bit gradients (fp32_grad_accumulation false): not Megatron-LM's fp32 default.
  CHECK(has(f, "--grad-reduce-in-bf16"));
  CHECK(has(f, "--optimizer adam"));
  // GPT-3 175B: 96 layers, hidden 12288, 96 heads, ffn 4h, sequence 2048,
  // GeLU, layer norm, learned positions, tied embeddings, biases.
  CHECK(has(f, "--num-layers 96"));
  CHECK(has(f, "--hidden-size 12288"));
  CHECK(has(f, "--ffn-hidden-size 49152"));
  CHECK(has(f, "--num-attention-heads 96"));
  CHECK_FALSE(has(f, "--group-query-attention"));
  CHECK(has(f, "--seq-length 2048"));
  CHECK(has(f, "--max-position-embeddings 2048"));
  CHECK(has(f, "--normalization LayerNorm"));
  CHECK(has(f, "--position-embedding-type learned_absolute"));
  CHECK_FALSE(has(f, "--swiglu"));
  CHECK_FALSE(has(f, "--untie-embeddings-and-output-weights"));
  CHECK(has(f, "--attention-backend flash"));
  // Every choice of this plan is expressible.
  CHECK(e.unsupported.empty());
  // One shell line: every flag line but the last ends with " \".
  CHECK(contains(e.text, "--tensor-model-parallel-size 8 \\\n"));
  CHECK(e.text.back() == '\n');
  CHECK(e.text[e.text.size() - 2] != '\\');
}

TEST_CASE("megatron: 2021 Megatron-LM's unfused gradient accumulation and blocking TP all-reduce") {
  const auto sc = scenario(R"({"model": "gpt3-175b", "cluster": {"preset": "dgx-a100-80g", "nodes": 8},
      "batch": {"global": 64, "micro": 1},
      "plan": {"tp": 8, "pp": 8, "precision": "fp16",
               "implementation": {"grad_accumulation_fusion": false, "tp_grad_overlap": false}}})");
  const auto e = export_megatron(sc);
  // Gradient-accumulation fusion has a flag to turn it off.
  CHECK(has(flags(e), "--no-gradient-accumulation-fusion"));
  // The asynchronous input-gradient all-reduce no longer can be turned off:
  // its flag is deprecated and ignored, so the plan's choice is reported.
  CHECK_FALSE(has(flags(e), "--no-async-tensor-model-parallel-allreduce"));
  CHECK(contains(unsupported(e, "implementation.tp_grad_overlap"), "deprecated and ignored"));
  // The defaults emit neither.
  const auto d = export_megatron(gpt3());
  CHECK_FALSE(has(flags(d), "--no-gradient-accumulation-fusion"));
  CHECK(unsupported(d, "implementation.tp_grad_overlap").empty());
}

TEST_CASE("megatron: ZeRO-3 with offload on one pipeline stage is Megatron-FSDP") {
  const auto e = export_megatron(llama_zero3(1));
  const auto f = flags(e);
  // ZeRO-3 = sharding strategy optim_grads_params of Megatron-FSDP, which
  // needs the fsdp_dtensor checkpoint format and no gradient-accumulation fusion.
  CHECK(has(f, "--use-megatron-fsdp"));
  CHECK(has(f, "--data-parallel-sharding-strategy optim_grads_params"));
  CHECK(has(f, "--use-distributed-optimizer"));
  CHECK(has(f, "--no-gradient-accumulation-fusion"));
  CHECK(has(f, "--ckpt-format fsdp_dtensor"));
  // Optimizer state and step on the CPU: the hybrid device optimizer.
  CHECK(has(f, "--optimizer-cpu-offload"));
  CHECK(has(f, "--use-precision-aware-optimizer"));
  // Full recompute: every layer's input kept, one layer recomputed at a time.
  CHECK(has(f, "--recompute-granularity full"));
  CHECK(has(f, "--recompute-method uniform"));
  CHECK(has(f, "--recompute-num-layers 1"));
  // Llama 3: SwiGLU, RMSNorm, RoPE, GQA with 8 kv heads, untied, no biases.
  CHECK(has(f, "--swiglu"));
  CHECK(has(f, "--normalization RMSNorm"));
  CHECK(has(f, "--position-embedding-type rope"));
  CHECK(has(f, "--group-query-attention"));
  CHECK(has(f, "--num-query-groups 8"));
  CHECK(has(f, "--untie-embeddings-and-output-weights"));
  CHECK(has(f, "--disable-bias-linear"));
  // Megatron-LM keeps parameters on the GPU: listed, printed as a comment.
  CHECK(unsupported(e, "offload.weights=true") != "");
  CHECK(contains(e.text, "# not expressible in Megatron-LM: offload.weights=true"));
  CHECK(e.unsupported.size() == 1);
}

TEST_CASE("megatron: ZeRO-3 with pipeline parallelism is not expressible") {
  const auto e = export_megatron(llama_zero3(2));
  const auto f = flags(e);
  // Megatron-FSDP does not take pp > 1 and the distributed optimizer is
  // ZeRO-1: zero=3 is listed, and neither is emitted in its place.
  CHECK(unsupported(e, "zero=3") != "");
  CHECK(contains(e.text, "# not expressible in Megatron-LM: zero=3 with pp=2"));
  CHECK_FALSE(has(f, "--use-megatron-fsdp"));
  CHECK_FALSE(has(f, "--use-distributed-optimizer"));
  // …and so is the CPU optimizer, which needs the distributed optimizer.
  CHECK(unsupported(e, "offload.optimizer=cpu") != "");
  CHECK_FALSE(has(f, "--optimizer-cpu-offload"));
}

TEST_CASE("megatron: the FP8 recipe as --fp8-recipe and its format, read back by import") {
  // arguments.py: --fp8-recipe, default 'delayed', choices tensorwise,
  // delayed, mxfp8, blockwise; the block-scaled recipes quantize in E4M3
  // (low_precision_training.md's B200 flags: --fp8-format e4m3 --fp8-recipe mxfp8).
  auto on = [](const std::string& gpu, const std::string& recipe) {
    return scenario(R"({"model": "llama3-8b", "cluster": {"gpu": ")" + gpu + R"(", "nodes": 1},
        "batch": {"global": 64, "micro": 1}, "plan": {"dp": 8, "precision": "fp8")" +
                    (recipe.empty() ? std::string() : R"(, "fp8_recipe": ")" + recipe + "\"") + "}}");
  };
  const auto delayed = on("h100-sxm", ""), mx = on("b200", "mxfp8"), block = on("h100-sxm", "blockwise");
  CHECK(has(flags(export_megatron(delayed)), "--fp8-format hybrid"));
  CHECK_FALSE(has_prefix(flags(export_megatron(delayed)), "--fp8-recipe"));
  CHECK(has(flags(export_megatron(mx)), "--fp8-format e4m3"));
  CHECK(has(flags(export_megatron(mx)), "--fp8-recipe mxfp8"));
  CHECK(has(flags(export_megatron(block)), "--fp8-recipe blockwise"));
  for (const auto* sc : {&delayed, &mx, &block})
    CHECK(import_plan(*sc, ExportTarget::Megatron, export_megatron(*sc).text, "x.sh").scenario.plan.fp8_recipe ==
          sc->plan.fp8_recipe);
  // torchao's rowwise: torchtitan's [float8] recipe_name (its tensorwise the
  // converter's default); Megatron-Core has no such recipe: listed.
  const auto rows = on("h100-sxm", "rowwise"), tensor = on("h100-sxm", "tensorwise");
  const Exported tt = export_plan(rows, ExportTarget::TorchTitan);
  CHECK(tt.unsupported.empty());
  CHECK(tt.text.find("[float8]\nrecipe_name = \"rowwise\"") != std::string::npos);
  for (const auto* sc : {&rows, &tensor})
    CHECK(import_plan(*sc, ExportTarget::TorchTitan, export_plan(*sc, ExportTarget::TorchTitan).text, "x.toml")
              .scenario.plan.fp8_recipe == sc->plan.fp8_recipe);
  const Exported mg = export_megatron(rows);
  REQUIRE(mg.unsupported.size() == 1);
  CHECK(mg.unsupported[0].rfind("fp8_recipe=rowwise", 0) == 0);
}

TEST_CASE("FP4: Megatron-Core's --fp4-format e2m1 --fp4-recipe nvfp4, read back by import; listed elsewhere") {
  // arguments.py: --fp4-format (choices e2m1, dest fp4) and --fp4-recipe
  // (choices nvfp4, its default) over --bf16.
  const auto sc = scenario(R"({"model": "llama3-8b", "cluster": {"gpu": "b200", "nodes": 1},
      "batch": {"global": 64, "micro": 1}, "plan": {"dp": 8, "zero": 1, "precision": "fp4"}})");
  const Exported mg = export_megatron(sc);
  const auto f = flags(mg);
  CHECK(mg.unsupported.empty());
  CHECK(has(f, "--bf16"));
  CHECK(has(f, "--fp4-format e2m1"));
  CHECK(has(f, "--fp4-recipe nvfp4"));
  CHECK_FALSE(has_prefix(f, "--fp8-format"));
  CHECK(import_plan(sc, ExportTarget::Megatron, mg.text, "x.sh").scenario.plan.precision == cost::Precision::FP4);
  // An FP4 format Megatron-Core does not have is refused, naming the flag.
  std::string bad = mg.text;
  bad.replace(bad.find("--fp4-format e2m1"), 17, "--fp4-format e3m0");
  CHECK_THROWS_WITH(import_plan(sc, ExportTarget::Megatron, bad, "x.sh"),
                    doctest::Contains("--fp4-format: 'e3m0' is not e2m1"));
  // The first and last blocks in bf16: arguments.py's --first-last-layers-bf16
  // with --num-layers-at-start-in-bf16 and --num-layers-at-end-in-bf16 (1
  // each by default), read back.
  auto ends = sc;
  ends.plan.bf16_first_layers = 2;
  ends.plan.bf16_last_layers = 3;
  const auto fe = flags(export_megatron(ends));
  CHECK(has(fe, "--first-last-layers-bf16"));
  CHECK(has(fe, "--num-layers-at-start-in-bf16 2"));
  CHECK(has(fe, "--num-layers-at-end-in-bf16 3"));
  const strategies::Plan back = import_plan(ends, ExportTarget::Megatron, export_megatron(ends).text, "x.sh").scenario.plan;
  CHECK(back.bf16_first_layers == 2);
  CHECK(back.bf16_last_layers == 3);
  CHECK_FALSE(has(flags(mg), "--first-last-layers-bf16"));
  // --attention-backend: cudnn as fused, read back; auto leaves the stack's default.
  auto cud = sc;
  cud.plan.implementation.attention = cost::AttentionKernel::Cudnn;
  const Exported ce = export_megatron(cud);
  CHECK(has(flags(ce), "--attention-backend fused"));
  CHECK(import_plan(cud, ExportTarget::Megatron, ce.text, "x.sh").scenario.plan.implementation.attention ==
        cost::AttentionKernel::Cudnn);
  std::string autofile = ce.text;
  autofile.replace(autofile.find("--attention-backend fused"), 25, "--attention-backend auto");
  // (Megatron-LM's stack, megatron-lm-2025, runs Transformer Engine's choice: cuDNN's.)
  CHECK(import_plan(cud, ExportTarget::Megatron, autofile, "x.sh").scenario.plan.implementation.attention ==
        cost::AttentionKernel::Cudnn);
  // torchtitan's converters are float8 and MXFP8: listed, bf16 emitted.
  auto fsdp = sc;
  fsdp.plan.zero = 3;
  const Exported tt = export_plan(fsdp, ExportTarget::TorchTitan);
  REQUIRE(tt.unsupported.size() == 1);
  CHECK(tt.unsupported[0].rfind("precision=fp4", 0) == 0);
}

TEST_CASE("megatron: per-layer model choices as Megatron-Core's flags, read back by import") {
  // arguments.py (NVIDIA/Megatron-LM): --moe-layer-freq takes "a Python list
  // expression ... where 1 indicates an expert layer and 0 indicates a dense
  // layer"; --window-size is FlashAttention's (left, right) window and
  // --window-attn-skip-freq N puts "one full attention layer after (N-1) SWA
  // layers". DeepSeek-V3's 3 dense blocks of 61; Gemma 3's window of 1024
  // keys (1023 earlier keys and the query) with every 6th layer global.
  const auto deepseek = scenario(R"({"model": "deepseek-v3", "cluster": {"gpu": "h800", "nodes": 256},
      "batch": {"global": 15360, "micro": 1},
      "plan": {"dp": 128, "tp": 1, "pp": 16, "ep": 64, "zero": 1, "precision": "bf16"}})");
  const auto ds = flags(export_megatron(deepseek));
  CHECK(has(ds, "--moe-layer-freq '[0]*3+[1]*58'"));
  CHECK_FALSE(has_prefix(ds, "--window-size"));
  // arguments.py's --mtp-num-layers ("D sequential modules to predict D
  // additional tokens"): DeepSeek-V3's one module.
  CHECK(has(ds, "--mtp-num-layers 1"));
  const auto gemma = scenario(R"({"model": "gemma3-27b", "cluster": {"preset": "dgx-h100", "nodes": 4},
      "batch": {"global": 256, "micro": 1}, "plan": {"dp": 8, "tp": 4, "precision": "bf16"}})");
  const Exported g = export_megatron(gemma);
  CHECK(has(flags(g), "--window-size 1023,0"));
  CHECK(has(flags(g), "--window-attn-skip-freq 6"));
  CHECK_FALSE(has_prefix(flags(g), "--moe-layer-freq"));
  // Read back on the same models; on another model the flags are named.
  for (const auto* sc : {&deepseek, &gemma})
    CHECK(import_plan(*sc, ExportTarget::Megatron, export_megatron(*sc).text, "x.sh").scenario.plan.tp ==
          sc->plan.tp);
  auto no_mtp = deepseek;
  no_mtp.model.mtp_layers = 0;
  CHECK(testing::input_error_of([&] {
          import_plan(no_mtp, ExportTarget::Megatron, export_megatron(deepseek).text, "x.sh");
        }) == "x.sh: --mtp-num-layers: is 1, the scenario's model has no multi-token prediction modules "
              "[import-model]");
  CHECK(testing::input_error_of([&] {
          import_plan(deepseek, ExportTarget::Megatron, export_megatron(no_mtp).text, "x.sh");
        }) == "x.sh: --mtp-num-layers: is absent, the scenario's model has 1 [import-model]");
  auto other = gemma;
  other.model.attention_window->global_every = 2;
  CHECK(testing::input_error_of([&] { import_plan(other, ExportTarget::Megatron, g.text, "x.sh"); }) ==
        "x.sh: --window-attn-skip-freq: is 6, the scenario's model has 2 [import-model]");
  other.model.attention_window.reset();
  CHECK(testing::input_error_of([&] { import_plan(other, ExportTarget::Megatron, g.text, "x.sh"); }) ==
        "x.sh: --window-size: is 1023,0, the scenario's model has no sliding window [import-model]");
}

TEST_CASE("megatron: --moe-layer-freq expresses the whole MoE layer pattern") {
  // arguments.py's moe_freq_type: an integer N is Megatron-Core's "one
  // expert layer for every N-1 dense layers" (gpt_layer_specs.py: i % N ==
  // 0); any other pattern is a Python list expression such as
  // "([1]*3+[0]*1)*3". On an 8-layer model of 4 experts:
  auto export_with = [](const std::string& moe) {
    return export_megatron(scenario(R"({"model": {"layers": 8, "hidden": 256, "heads": 4, "vocab": 1000,
        "seq_len": 128, "moe": )" + moe + R"(}, "cluster": {"preset": "dgx-h100", "nodes": 1},
        "batch": {"global": 8, "micro": 1}, "plan": {"dp": 8, "precision": "bf16"}})"));
  };
  // - every 2 from block 0: Megatron's own rule, the integer 2;
  CHECK(has(flags(export_with(R"({"experts": 4, "every": 2})")), "--moe-layer-freq '2'"));
  // - Qwen's decoder_sparse_step 2 (every 2 from block 1): 0, 1 four times;
  CHECK(has(flags(export_with(R"({"experts": 4, "every": 2, "offset": 1})")), "--moe-layer-freq '([0]+[1])*4'"));
  // - DeepSeek's first_k_dense_replace 3 with moe_layer_freq 2: experts in
  //   4 and 6 of 0 … 7;
  CHECK(has(flags(export_with(R"({"experts": 4, "first_dense": 3, "every": 2})")),
            "--moe-layer-freq '[0]*4+([1]+[0])*2'"));
  // - blocks 2 and 5 dense among expert ones: two experts and a dense
  //   block twice, then two experts;
  CHECK(has(flags(export_with(R"({"experts": 4, "dense_layers": [2, 5]})")),
            "--moe-layer-freq '([1]*2+[0])*2+[1]*2'"));
  // - every block: no flag (Megatron's default 1).
  CHECK_FALSE(has_prefix(flags(export_with(R"({"experts": 4})")), "--moe-layer-freq"));
  // Import requires the model's pattern: the Qwen one read on the
  // DeepSeek-like model is named.
  const auto ds = scenario(R"({"model": {"layers": 8, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128,
      "moe": {"experts": 4, "first_dense": 3, "every": 2}}, "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 8, "micro": 1}, "plan": {"dp": 8, "precision": "bf16"}})");
  CHECK(import_plan(ds, ExportTarget::Megatron, export_megatron(ds).text, "x.sh").scenario.plan.dp == 8);
  const Exported qwen = export_with(R"({"experts": 4, "every": 2, "offset": 1})");
  CHECK(testing::input_error_of([&] { import_plan(ds, ExportTarget::Megatron, qwen.text, "x.sh"); }) ==
        "x.sh: --moe-layer-freq: is ([0]+[1])*4, the scenario's model has [0]*4+([1]+[0])*2 [import-model]");
}

TEST_CASE("plan.moe: Megatron-LM's token dropping flags, read back; the load imbalance is the run's") {
  // arguments.py: --moe-expert-capacity-factor ("None means no token will
  // be dropped") and --moe-pad-expert-input-to-capacity.
  const auto sc = scenario(R"({"model": "mixtral-8x7b", "cluster": {"preset": "dgx-h100", "nodes": 4},
      "batch": {"global": 64, "micro": 1},
      "plan": {"tp": 2, "ep": 8, "precision": "bf16",
               "moe": {"capacity_factor": 1.25, "pad_to_capacity": true, "load_imbalance": 1.5}}})");
  const Exported m = export_megatron(sc);
  CHECK(has(flags(m), "--moe-expert-capacity-factor 1.25"));
  CHECK(has(flags(m), "--moe-pad-expert-input-to-capacity"));
  CHECK(std::any_of(m.notes.begin(), m.notes.end(), [](const std::string& n) {
    return contains(n, "moe.load_imbalance=1.5");
  }));
  const Imported back = import_plan(sc, ExportTarget::Megatron, m.text, "x.sh");
  CHECK(back.scenario.plan.moe == sc.plan.moe);
  CHECK(std::find(back.from_base.begin(), back.from_base.end(), "plan.moe.load_imbalance") != back.from_base.end());
  CHECK(contains(unsupported(export_deepspeed(sc), "moe.capacity_factor"), "deepspeed.moe.layer.MoE"));
  CHECK(contains(unsupported(export_torchtitan(sc), "moe.capacity_factor"), "without dropping"));
  // Dropless: neither flag.
  auto dropless = sc;
  dropless.plan.moe = {};
  CHECK_FALSE(has_prefix(flags(export_megatron(dropless)), "--moe-expert-capacity-factor"));
  CHECK_FALSE(has(flags(export_megatron(dropless)), "--moe-pad-expert-input-to-capacity"));
}

TEST_CASE("partition_activations: Megatron-LM's --distribute-saved-activations, DeepSpeed's partition_activations") {
  // arguments.py: --distribute-saved-activations ("If set, distribute
  // recomputed activations across model parallel group"); DeepSpeed's
  // activation_checkpointing.partition_activations. Both read back; torchtitan
  // lists it as not expressible.
  const auto sc = scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 2},
      "batch": {"global": 64, "micro": 1},
      "plan": {"tp": 4, "recompute": "full", "partition_activations": true, "precision": "bf16"}})");
  const Exported m = export_megatron(sc);
  CHECK(has(flags(m), "--distribute-saved-activations"));
  CHECK(import_plan(sc, ExportTarget::Megatron, m.text, "x.sh").scenario.plan.partition_activations);
  const Exported d = export_deepspeed(sc);
  const auto j = nlohmann::json::parse(d.text);
  CHECK(j["activation_checkpointing"]["partition_activations"] == true);
  CHECK(import_plan(sc, ExportTarget::DeepSpeed, d.text, "ds.json").scenario.plan.partition_activations);
  CHECK(contains(unsupported(export_torchtitan(sc), "partition_activations"), "torchtitan's checkpointing"));
  // Without it, neither writes it.
  auto plain = sc;
  plain.plan.partition_activations = false;
  CHECK_FALSE(has(flags(export_megatron(plain)), "--distribute-saved-activations"));
  CHECK(nlohmann::json::parse(export_deepspeed(plain).text)["activation_checkpointing"]["partition_activations"] ==
        false);
}

TEST_CASE("megatron: every_k and sqrt recompute are uniform segments") {
  // 12 layers on one stage: every_k 4 checkpoints every 4th layer input;
  // sqrt keeps ceil(sqrt(12)) = 4 as well.
  for (const char* rc : {R"("every_k", "recompute_k": 4)", R"("sqrt")"}) {
    const auto e = export_megatron(scenario(
        std::string(R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 8},
            "plan": {"recompute": )") + rc + "}}"));
    const auto f = flags(e);
    CHECK(has(f, "--recompute-granularity full"));
    CHECK(has(f, "--recompute-method uniform"));
    CHECK(has(f, "--recompute-num-layers 4"));
  }
}

TEST_CASE("megatron: recompute_modules beyond the attention core are --recompute-modules") {
  // DeepSeek-V3's: the MLA up-projections and the norms (Megatron-Core's
  // names, in their order); the default, the core alone, writes no flag.
  const std::string base = R"({"model": "deepseek-v3", "cluster": {"gpu": "h800", "nodes": 256},
      "batch": {"global": 15360, "micro": 1}, "stack": "megatron-lm-2025",
      "plan": {"dp": 128, "pp": 16, "ep": 64, "zero": 1, "recompute": "selective")";
  const auto f = flags(export_megatron(scenario(base + R"(, "recompute_modules": ["layernorm", "mla_up_proj"]}})")));
  CHECK(has(f, "--recompute-granularity selective"));
  CHECK(has(f, "--recompute-modules layernorm mla_up_proj"));
  // bf16 moments: the precision-aware optimizer's types.
  const auto states = flags(export_megatron(scenario(base + R"(, "optimizer": "adamw", "optimizer_states": "bf16"}})")));
  CHECK(has(states, "--use-precision-aware-optimizer"));
  CHECK(has(states, "--exp-avg-dtype bf16"));
  CHECK(has(states, "--exp-avg-sq-dtype bf16"));
  const auto plain = flags(export_megatron(scenario(base + "}}")));
  CHECK(has(plain, "--recompute-granularity selective"));
  for (const auto& flag : plain) CHECK(flag.rfind("--recompute-modules", 0) != 0);
}

TEST_CASE("megatron, torchtitan: uneven pipeline stages") {
  // 12 layers as 2, 4, 4, 2: only the first and last stage differ, which
  // Megatron-LM sets apart from an even split; torchtitan takes split points
  // at the first layer of stages 2, 3 and 4 (layers 2, 6 and 10).
  const auto sc = scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 64, "micro": 1},
      "plan": {"pp": 4, "stage_layers": [2, 4, 4, 2]}})");
  const auto m = export_megatron(sc);
  const auto f = flags(m);
  CHECK(has(f, "--decoder-first-pipeline-num-layers 2"));
  CHECK(has(f, "--decoder-last-pipeline-num-layers 2"));
  CHECK(m.unsupported.empty());
  const auto t = export_torchtitan(sc).text;
  CHECK(contains(t, "pipeline_parallel_split_points = [\"layers.2\", \"layers.6\", \"layers.10\"]\n"));
  CHECK(contains(t, "pipeline_parallel_schedule = \"1F1B\"\n"));
  // 1, 4, 5, 2: the middle stages differ from each other → the layout
  // flag (E embedding, t layers, L output layer and loss, "|" between chunks).
  const auto odd = export_megatron(scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 64, "micro": 1},
      "plan": {"pp": 4, "stage_layers": [1, 4, 5, 2]}})"));
  CHECK(has(flags(odd), "--pipeline-model-parallel-layout 'Et|t*4|t*5|t*2L'"));
  CHECK(odd.unsupported.empty());
  CHECK_FALSE(has_prefix(flags(odd), "--decoder-first-pipeline-num-layers"));
}

TEST_CASE("megatron, torchtitan, deepspeed: the embedding and the head in chunks of their own") {
  // 12 layers + the embedding and the head over 2 stages × 2 virtual: 14
  // units, [3, 4, 4, 3] less one at each end = [2, 4, 4, 2]; over pp 7 with
  // v 2 (14 chunks): [0, 1, …, 1, 0], the embedding and the head alone.
  auto sc = scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 56, "micro": 1},
      "plan": {"pp": 2, "schedule": "interleaved", "virtual_stages": 2,
               "pipeline_layout": "embedding_head_as_layers"}})");
  auto m = export_megatron(sc);
  CHECK(has(flags(m), "--pipeline-model-parallel-layout 'Et*2|t*4|t*4|t*2L'"));
  CHECK_FALSE(has_prefix(flags(m), "--num-layers-per-virtual-pipeline-stage"));
  CHECK(unsupported(m, "layers per chunk") == "");
  const auto ds = export_deepspeed(sc);
  CHECK(std::any_of(ds.notes.begin(), ds.notes.end(),
                    [](const std::string& n) { return contains(n, "partition_method=\"uniform\""); }));
  sc.plan.pp = 7;
  sc.cluster.nodes = 2;
  const auto alone = chunk_layers(sc.plan, sc.model.layers);
  REQUIRE(alone.size() == 14);
  m = export_megatron(sc);
  CHECK(has(flags(m), "--pipeline-model-parallel-layout 'E|t|t|t|t|t|t|t|t|t|t|t|t|L'"));
  // torchtitan: no layer to split before the head-only chunk, so every
  // chunk's modules by name.
  sc.plan.zero = 3;
  const auto t = export_torchtitan(sc).text;
  CHECK_FALSE(contains(t, "pipeline_parallel_split_points"));
  CHECK(contains(t, "module_fqns_per_model_part = [[\"tok_embeddings\"], [\"layers.0\"], [\"layers.1\"], "));
  CHECK(contains(t, "[\"layers.11\"], [\"norm\", \"output\"]]\n"));
}

TEST_CASE("megatron, deepspeed, torchtitan: choices none of them has are listed") {
  // Top-k compression, PipeDream and Adafactor exist in no engine's
  // configuration: each export lists all three.
  const auto sc = scenario(R"({"model": "gpt2-124m", "cluster": "dgx-h100",
      "batch": {"global": 64, "micro": 1},
      "plan": {"pp": 2, "schedule": "pipedream", "optimizer": "adafactor",
               "compression": {"method": "topk", "ratio": 0.01}}})");
  for (auto target : {ExportTarget::Megatron, ExportTarget::DeepSpeed, ExportTarget::TorchTitan}) {
    CAPTURE(engine_name(target));
    // strata export refuses them (each engine's capabilities); the
    // renderers, asked directly, still list every one.
    CHECK(contains(testing::input_error_of([&] { export_plan(sc, target); }), "cannot launch this plan"));
    const auto e = target == ExportTarget::Megatron    ? export_megatron(sc)
                   : target == ExportTarget::DeepSpeed ? export_deepspeed(sc)
                                                       : export_torchtitan(sc);
    CHECK(unsupported(e, "compression=topk") != "");
    CHECK(unsupported(e, "schedule=pipedream") != "");
    CHECK(unsupported(e, "optimizer=adafactor") != "");
    if (target != ExportTarget::DeepSpeed)
      CHECK(contains(e.text, std::string("# not expressible in ") +
                                 std::string(engine_name(target)) + ": compression=topk"));
  }
}

// The plan explore found first for Llama-3-70B on 8 DGX H100 (issue 21): dp
// 16, tp 2, pp 2, ZeRO-2, interleaved with 4 chunks per stage, activation
// offload. None of the three engines runs it.
strategies::Scenario llama_issue21() {
  return scenario(R"({"model": {"preset": "llama3-70b", "seq_len": 4096},
      "cluster": {"preset": "dgx-h100", "nodes": 8}, "batch": {"global": 512, "micro": 1},
      "plan": {"dp": 16, "tp": 2, "pp": 2, "zero": 2, "schedule": "interleaved",
               "virtual_stages": 4, "sequence_parallel": true, "precision": "bf16",
               "optimizer": "adamw", "offload": {"activations": true}}})");
}

TEST_CASE("export refuses a plan the engine cannot launch, naming the rule (exit 2)") {
  const auto sc = llama_issue21();
  // Megatron-LM: no sharded gradients with pipelining (its first rule that
  // matches; activation offload with pp > 1 would be the next).
  CHECK(testing::input_error_of([&] { export_plan(sc, ExportTarget::Megatron); }) ==
        "test.json: plan.zero: megatron-lm-2025 cannot launch this plan (sharded-grads-with-pp: zero "
        "2|3, pp >= 2): Megatron-LM shards gradients and parameters only in Megatron-FSDP "
        "(--use-megatron-fsdp), documented with tensor, context and expert parallelism, not pipeline "
        "parallelism; its distributed optimizer shards the optimizer state but keeps the whole "
        "gradient buffer on every rank (zero 1) [megatron-lm-2025/sharded-grads-with-pp; strata "
        "export --to megatron refuses what the engine cannot run]");
  CHECK(contains(testing::input_error_of([&] { export_plan(sc, ExportTarget::DeepSpeed); }),
                 "test.json: plan.zero: deepspeed cannot launch this plan (sharded-grads-with-pp"));
  CHECK(contains(testing::input_error_of([&] { export_plan(sc, ExportTarget::TorchTitan); }),
                 "test.json: plan.offload.activations: torchtitan cannot launch this plan "
                 "(activation-offload: offload.activations true): torchtitan has no activation offload"));
}

// Golden files: the full text of each engine's export of the bundled
// Llama-3-70B FSDP scenario (tp 8, ZeRO-3, sequence parallel, full
// recompute). A change to any flag, key or default shows here whole.
std::string golden(const std::string& name) {
  std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/report/testdata/" + name);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("golden: llama3-70b-fsdp-h100 for each engine") {
  auto sc = strategies::load_scenario(std::string(STRATA_SOURCE_DIR) +
                                      "/configs/scenarios/llama3-70b-fsdp-h100.json");
  sc.file = "llama3-70b-fsdp-h100.json";
  CHECK(export_plan(sc, ExportTarget::Megatron).text == golden("llama3-70b-fsdp-h100.megatron.sh"));
  CHECK(export_plan(sc, ExportTarget::DeepSpeed).text == golden("llama3-70b-fsdp-h100.deepspeed.json"));
  CHECK(export_plan(sc, ExportTarget::TorchTitan).text == golden("llama3-70b-fsdp-h100.torchtitan.toml"));
}

TEST_CASE("export uses the engine's defaults for what the scenario does not set") {
  // Strata's defaults keep 2-byte bf16 gradients and no pipeline
  // scatter/gather; Megatron-LM accumulates bf16 gradients in fp32 and
  // scatters by default, so neither --grad-reduce-in-bf16 nor
  // --no-scatter-gather-tensors-in-pipeline is printed, and a note says so.
  const auto plain = scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 64, "micro": 1},
      "plan": {"tp": 2, "pp": 2, "sequence_parallel": true, "zero": 1, "precision": "bf16"}})");
  const auto e = export_plan(plain, ExportTarget::Megatron);
  CHECK_FALSE(has(flags(e), "--grad-reduce-in-bf16"));
  CHECK_FALSE(has(flags(e), "--no-scatter-gather-tensors-in-pipeline"));
  CHECK(contains(e.text, "# note: implementation.fp32_grad_accumulation = true, Megatron-LM's default "
                         "(the plan had false, Strata's default;"));
  // Llama 3's rope base (torchtitan's llama3 flavors and Meta's config.json: 500000).
  CHECK(has(flags(e), "--rotary-base 500000"));
  // Said by the plan itself, it is exported.
  const auto said = scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 64, "micro": 1},
      "plan": {"tp": 2, "pp": 2, "sequence_parallel": true, "zero": 1, "precision": "bf16",
               "implementation": {"fp32_grad_accumulation": false, "pp_scatter_gather": false}}})");
  const auto f = flags(export_plan(said, ExportTarget::Megatron));
  CHECK(has(f, "--grad-reduce-in-bf16"));
  CHECK(has(f, "--no-scatter-gather-tensors-in-pipeline"));
  // The base is the model's own rope_theta (the presets' from their
  // config.json). Llama 2 uses Megatron-LM's default base 10000: no flag,
  // also for a variant of it; a model's own base is exported; a rope model
  // without one gets a note instead of a guess.
  const auto l2 = export_plan(scenario(R"({"model": "llama2-7b", "cluster": "1xh100-sxm",
      "batch": {"global": 8, "micro": 1}})"), ExportTarget::Megatron);
  CHECK_FALSE(has_prefix(flags(l2), "--rotary-base"));
  const auto variant = export_plan(scenario(R"({"model": {"preset": "llama2-7b", "layers": 30},
      "cluster": "1xh100-sxm", "batch": {"global": 8, "micro": 1}})"), ExportTarget::Megatron);
  CHECK_FALSE(has_prefix(flags(variant), "--rotary-base"));
  CHECK_FALSE(contains(variant.text, "rope base"));
  const auto own = export_plan(scenario(R"({"model": {"preset": "llama2-7b", "rope_theta": 1000000},
      "cluster": "1xh100-sxm", "batch": {"global": 8, "micro": 1}})"), ExportTarget::Megatron);
  CHECK(has(flags(own), "--rotary-base 1000000"));
  const auto unknown = export_plan(scenario(R"({"model": {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000,
      "seq_len": 128, "position_embedding": "rope"}, "cluster": "1xh100-sxm", "batch": {"global": 8, "micro": 1}})"),
                                   ExportTarget::Megatron);
  CHECK(contains(unknown.text, "# note: rope base: the model gives no rope_theta"));
}

TEST_CASE("torchtitan: a Llama 3 shape names its model and flavor") {
  const auto e = export_plan(scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 64, "micro": 1}, "plan": {"zero": 3, "optimizer": "adamw"}})"),
                             ExportTarget::TorchTitan);
  CHECK(contains(e.text, "\n[model]\nname = \"llama3\"\nflavor = \"8B\"\n"));
  const auto other = export_plan(scenario(R"({"model": "gpt3-1.3b", "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 64, "micro": 1}, "plan": {"zero": 3, "optimizer": "adamw"}})"),
                                 ExportTarget::TorchTitan);
  CHECK(contains(other.text, "# [model] name and flavor: the torchtitan flavor with 24 layers"));
  CHECK_FALSE(contains(other.text, "flavor = "));
}

TEST_CASE("torchtitan: a plan priced with fused elementwise ops compiles; eager does not") {
  // Fused norms, RoPE and gated units are what torch.compile makes of the
  // blocks; torchtitan's default (compile off) runs the eager modules, the
  // plan Strata prices with fused_elementwise false.
  auto with = [](const char* fused) {
    return export_plan(scenario(std::string(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
      "batch": {"global": 64, "micro": 1}, "plan": {"zero": 3, "optimizer": "adamw",
      "implementation": {"fused_elementwise": )") + fused + "}}}"),
                       ExportTarget::TorchTitan).text;
  };
  CHECK(contains(with("true"), "\ncompile = true\n"));
  CHECK_FALSE(contains(with("false"), "compile = true"));
  CHECK_FALSE(contains(with("false"), "fused_elementwise"));
}

TEST_CASE("deepspeed: GPT-3 175B batch, ZeRO-1 buckets, bf16") {
  const auto e = export_deepspeed(gpt3());
  const auto j = nlohmann::json::parse(e.text);  // plain JSON, no comments
  // train_batch_size = micro · accumulation · dp: 1536 = 1 · 96 · 16.
  CHECK(j.at("train_batch_size") == 1536);
  CHECK(j.at("train_micro_batch_size_per_gpu") == 1);
  CHECK(j.at("gradient_accumulation_steps") == 96);
  CHECK(j.at("bf16").at("enabled") == true);
  CHECK_FALSE(j.contains("fp16"));
  CHECK(j.at("data_types").at("grad_accum_dtype") == "bf16");
  const auto& z = j.at("zero_optimization");
  CHECK(z.at("stage") == 1);
  CHECK(z.at("overlap_comm") == true);
  CHECK(z.at("contiguous_gradients") == true);
  // Strata's 25 MiB gradient bucket in elements of 2 bytes: 13,107,200.
  CHECK(z.at("reduce_bucket_size") == 25 * 1024 * 1024 / 2);
  CHECK(z.at("allgather_bucket_size") == 25 * 1024 * 1024 / 2);
  CHECK_FALSE(z.contains("offload_optimizer"));
  // DeepSpeed's Adam is AdamW unless adam_w_mode is false.
  CHECK(j.at("optimizer").at("type") == "Adam");
  CHECK(j.at("optimizer").at("params").at("adam_w_mode") == false);
  // Selective recompute: the model code checkpoints; the section tunes it.
  CHECK(j.at("activation_checkpointing").at("cpu_checkpointing") == false);
  CHECK(j.at("activation_checkpointing").at("partition_activations") == false);
  CHECK(j.at("activation_checkpointing").at("contiguous_memory_optimization") == false);
  // DeepSpeed's pipeline engine has its own 1F1B: interleaving is listed;
  // tp and pp come from the model code (notes).
  CHECK(unsupported(e, "schedule=interleaved") != "");
  CHECK(e.unsupported.size() == 1);
  CHECK(std::any_of(e.notes.begin(), e.notes.end(), [](const std::string& n) {
    return contains(n, "deepspeed.pipe.PipelineModule") && contains(n, "num_stages=8");
  }));
}

TEST_CASE("deepspeed: ZeRO-3 with optimizer and parameter offload") {
  // The gradient bucket and the parameter coordinator as `strata export`
  // renders them from the deepspeed stack (DeepSpeed's reduce_bucket_size,
  // 5e8 elements; stage3_max_live_parameters 1e9).
  strategies::Scenario sc = llama_zero3(1);
  sc.plan.implementation.zero3_reduce_bucket = 500'000'000;
  sc.plan.implementation.zero3_max_live = 1'000'000'000;
  sc.plan.implementation.zero3_host_per_rank = true;
  sc.plan.implementation.zero3_gather_copy_out = true;
  const auto e = export_deepspeed(sc);
  const auto j = nlohmann::json::parse(e.text);
  const auto& z = j.at("zero_optimization");
  CHECK(z.at("stage") == 3);
  CHECK(z.at("reduce_bucket_size") == 500'000'000);
  CHECK(z.at("offload_optimizer").at("device") == "cpu");
  CHECK(z.at("offload_optimizer").at("pin_memory") == true);
  CHECK(z.at("offload_param").at("device") == "cpu");
  CHECK(z.at("offload_param").at("pin_memory") == true);
  CHECK(j.at("optimizer").at("type") == "AdamW");
  // 256 = 1 · accumulation · dp 8 → 32 microbatches per step.
  CHECK(j.at("gradient_accumulation_steps") == 32);
  CHECK(e.unsupported.empty());
}

TEST_CASE("zero3_reduce_bucket: DeepSpeed's ZeRO-3 reduce_bucket_size, out and back; FSDP's engines have none") {
  // Unstated, the export renders the deepspeed stack's 5e8 elements (and
  // says so); stated, its own value; read back as written, absent as
  // DeepSpeed's default. A stated 0 (FSDP's per-module staging) DeepSpeed
  // cannot run; a bucket torchtitan's FSDP2 and Megatron-LM cannot.
  const auto sc = llama_zero3(1);
  const auto rendered = export_plan(sc, ExportTarget::DeepSpeed);
  CHECK(nlohmann::json::parse(rendered.text).at("zero_optimization").at("reduce_bucket_size") == 500'000'000);
  CHECK(rendered.rendered.implementation.zero3_reduce_bucket == 500'000'000);
  CHECK(std::any_of(rendered.notes.begin(), rendered.notes.end(), [](const std::string& n) {
    return contains(n, "implementation.zero3_reduce_bucket = 500000000 elements, DeepSpeed's default");
  }));
  strategies::Scenario stated = sc;
  stated.plan.implementation.zero3_reduce_bucket = 200'000'000;
  stated.implementation_keys.add(strategies::ImplKey::Zero3ReduceBucket);
  const auto mine = export_plan(stated, ExportTarget::DeepSpeed);
  CHECK(nlohmann::json::parse(mine.text).at("zero_optimization").at("reduce_bucket_size") == 200'000'000);
  CHECK(import_plan(sc, ExportTarget::DeepSpeed, mine.text, "ds.json").scenario.plan.implementation.zero3_reduce_bucket ==
        200'000'000);
  auto j = nlohmann::json::parse(mine.text);
  j["zero_optimization"].erase("reduce_bucket_size");
  CHECK(import_plan(sc, ExportTarget::DeepSpeed, j.dump(), "ds.json").scenario.plan.implementation.zero3_reduce_bucket ==
        500'000'000);
  j["zero_optimization"]["reduce_bucket_size"] = "big";
  CHECK_THROWS_WITH(import_plan(sc, ExportTarget::DeepSpeed, j.dump(), "ds.json"),
                    doctest::Contains("zero_optimization.reduce_bucket_size"));
  j["zero_optimization"]["stage"] = 2;
  j["zero_optimization"]["reduce_bucket_size"] = 1000;
  CHECK(import_plan(sc, ExportTarget::DeepSpeed, j.dump(), "ds.json").scenario.plan.implementation.zero3_reduce_bucket ==
        0);
  strategies::Scenario fsdp = sc;
  fsdp.implementation_keys.add(strategies::ImplKey::Zero3ReduceBucket);  // a stated 0
  CHECK(unsupported(export_plan(fsdp, ExportTarget::DeepSpeed), "implementation.zero3_reduce_bucket=0") != "");
  CHECK(unsupported(export_torchtitan(stated), "implementation.zero3_reduce_bucket=200000000") != "");
  CHECK(unsupported(export_megatron(stated), "implementation.zero3_reduce_bucket=200000000") != "");
  // Where it cannot act (ZeRO-2), nothing is listed.
  strategies::Scenario z2 = stated;
  z2.plan.zero = 2;
  CHECK(unsupported(export_torchtitan(z2), "implementation.zero3_reduce_bucket") == "");
}

TEST_CASE("DeepSpeed's parameter coordinator (zero3_max_live, zero3_prefetch_bucket, zero3_reuse_distance): out and back") {
  // Unstated, the deepspeed stack's 1e9, 5e7, 1e9 (DeepSpeed's defaults)
  // as stage3_max_live_parameters, stage3_prefetch_bucket_size and
  // stage3_max_reuse_distance; stated, their own; read back as written,
  // absent as the defaults. FSDP's gathers (zero3_max_live 0) DeepSpeed
  // cannot run; the coordinator torchtitan and Megatron-LM cannot.
  const auto sc = llama_zero3(1);
  const auto z = nlohmann::json::parse(export_plan(sc, ExportTarget::DeepSpeed).text).at("zero_optimization");
  CHECK(z.at("stage3_max_live_parameters") == 1'000'000'000);
  CHECK(z.at("stage3_prefetch_bucket_size") == 50'000'000);
  CHECK(z.at("stage3_max_reuse_distance") == 1'000'000'000);
  strategies::Scenario stated = sc;
  auto& im = stated.plan.implementation;
  im.zero3_max_live = 300'000'000, im.zero3_prefetch_bucket = 20'000'000, im.zero3_reuse_distance = 0;
  for (auto k : {strategies::ImplKey::Zero3MaxLive, strategies::ImplKey::Zero3PrefetchBucket,
                 strategies::ImplKey::Zero3ReuseDistance})
    stated.implementation_keys.add(k);
  const auto text = export_plan(stated, ExportTarget::DeepSpeed).text;
  const auto back = import_plan(sc, ExportTarget::DeepSpeed, text, "ds.json").scenario.plan.implementation;
  CHECK(back.zero3_max_live == 300'000'000);
  CHECK(back.zero3_prefetch_bucket == 20'000'000);
  CHECK(back.zero3_reuse_distance == 0);
  auto j = nlohmann::json::parse(text);
  for (const char* k : {"stage3_max_live_parameters", "stage3_prefetch_bucket_size", "stage3_max_reuse_distance"})
    j["zero_optimization"].erase(k);
  const auto defaults = import_plan(sc, ExportTarget::DeepSpeed, j.dump(), "ds.json").scenario.plan.implementation;
  CHECK(defaults.zero3_max_live == 1'000'000'000);
  CHECK(defaults.zero3_prefetch_bucket == 50'000'000);
  CHECK(defaults.zero3_reuse_distance == 1'000'000'000);
  j["zero_optimization"]["stage3_max_live_parameters"] = -1;
  CHECK_THROWS_WITH(import_plan(sc, ExportTarget::DeepSpeed, j.dump(), "ds.json"),
                    doctest::Contains("zero_optimization.stage3_max_live_parameters"));
  strategies::Scenario fsdp = sc;
  fsdp.implementation_keys.add(strategies::ImplKey::Zero3MaxLive);  // a stated 0
  CHECK(unsupported(export_plan(fsdp, ExportTarget::DeepSpeed), "implementation.zero3_max_live=0") != "");
  CHECK(unsupported(export_torchtitan(stated), "implementation.zero3_max_live=300000000") != "");
  CHECK(unsupported(export_megatron(stated), "implementation.zero3_max_live=300000000") != "");
}

TEST_CASE("zero3_host_per_rank and zero3_gather_copy_out: what DeepSpeed's gathers do, no flag, not FSDP2's") {
  // The deepspeed stack sets both (no ds_config key does): unstated, the
  // export notes them; stated false, DeepSpeed cannot run the plan; stated
  // true, torchtitan and Megatron-LM cannot (FSDP2 copies out, so only the
  // per-rank work is listed there).
  const auto sc = llama_zero3(1);
  const auto rendered = export_plan(sc, ExportTarget::DeepSpeed);
  CHECK(rendered.unsupported.empty());
  CHECK(rendered.rendered.implementation.zero3_host_per_rank);
  CHECK(std::any_of(rendered.notes.begin(), rendered.notes.end(), [](const std::string& n) {
    return contains(n, "implementation.zero3_host_per_rank = true, DeepSpeed's default") && contains(n, "no flag sets it");
  }));
  strategies::Scenario off = sc;
  off.implementation_keys.add(strategies::ImplKey::Zero3HostPerRank);
  off.implementation_keys.add(strategies::ImplKey::Zero3GatherCopyOut);
  const auto e = export_plan(off, ExportTarget::DeepSpeed);
  CHECK(unsupported(e, "implementation.zero3_host_per_rank=false") != "");
  CHECK(unsupported(e, "implementation.zero3_gather_copy_out=false") != "");
  strategies::Scenario on = sc;
  on.plan.implementation.zero3_host_per_rank = true;
  CHECK(unsupported(export_torchtitan(on), "implementation.zero3_host_per_rank=true") != "");
  CHECK(unsupported(export_megatron(on), "implementation.zero3_host_per_rank=true") != "");
}

TEST_CASE("deepspeed: fp16 with an fp32 accumulation buffer reduces 4-byte gradients") {
  // The bucket is 25 MiB of fp32 gradients: 6,553,600 elements; parameters
  // are still gathered in 16 bits (13,107,200 per bucket).
  const auto e = export_deepspeed(scenario(R"({"model": "gpt2-124m", "cluster": "1xa100-80g",
      "batch": {"global": 8}, "plan": {"precision": "fp16", "optimizer": "sgd",
      "implementation": {"fp32_grad_accumulation": true}}})"));
  const auto j = nlohmann::json::parse(e.text);
  CHECK(j.at("fp16").at("enabled") == true);
  CHECK(j.at("data_types").at("grad_accum_dtype") == "fp32");
  CHECK(j.at("zero_optimization").at("reduce_bucket_size") == 25 * 1024 * 1024 / 4);
  CHECK(j.at("zero_optimization").at("allgather_bucket_size") == 25 * 1024 * 1024 / 2);
  CHECK(j.at("optimizer").at("type") == "SGD");
  CHECK(j.at("optimizer").at("params").at("momentum") == 0.0);
}

TEST_CASE("grad_reduce_dtype: DeepSpeed's communication_data_type, torchtitan's mixed_precision_reduce, not Megatron-LM's") {
  // bf16 with fp32 gradient accumulation, reduced in bf16 (FSDP's PURE):
  // DeepSpeed names it, and its reduce bucket counts 2-byte elements;
  // torchtitan's FSDP2 reduces in bfloat16; Megatron-LM reduces its
  // main_grad buffer's dtype only, so the plan is listed as inexpressible.
  const auto sc = scenario(R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 8},
      "plan": {"precision": "bf16", "implementation": {"fp32_grad_accumulation": true, "grad_reduce_dtype": "bf16"}}})");
  const auto ds = nlohmann::json::parse(export_deepspeed(sc).text);
  CHECK(ds.at("data_types").at("grad_accum_dtype") == "fp32");
  CHECK(ds.at("communication_data_type") == "bf16");
  CHECK(ds.at("zero_optimization").at("reduce_bucket_size") == 25 * 1024 * 1024 / 2);
  const auto back = import_plan(sc, ExportTarget::DeepSpeed, export_deepspeed(sc).text, "ds.json");
  CHECK(back.scenario.plan.implementation.grad_reduce_dtype == strategies::GradReduceDtype::BF16);
  CHECK(contains(export_torchtitan(sc).text, "mixed_precision_reduce = \"bfloat16\""));
  CHECK(unsupported(export_megatron(sc), "implementation.grad_reduce_dtype=bf16") != "");
  // Without the setting the reduction is the accumulation's: fp32, and
  // DeepSpeed is left to derive it.
  const auto plain = scenario(R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 8},
      "plan": {"precision": "bf16", "implementation": {"fp32_grad_accumulation": true}}})");
  CHECK_FALSE(nlohmann::json::parse(export_deepspeed(plain).text).contains("communication_data_type"));
  CHECK(contains(export_torchtitan(plain).text, "mixed_precision_reduce = \"float32\""));
  CHECK(unsupported(export_megatron(plain), "implementation.grad_reduce_dtype") == "");
  // torchtitan's bfloat16 reduction reads back as the setting; a value
  // FSDP2 does not take is refused.
  const std::string titan = export_torchtitan(plain).text;
  std::string bf16 = titan;
  bf16.replace(bf16.find("\"float32\"\n", bf16.find("mixed_precision_reduce")), 10, "\"bfloat16\"\n");
  CHECK(import_plan(plain, ExportTarget::TorchTitan, bf16, "t.toml").scenario.plan.implementation.grad_reduce_dtype ==
        strategies::GradReduceDtype::BF16);
  CHECK(import_plan(plain, ExportTarget::TorchTitan, titan, "t.toml").scenario.plan.implementation.grad_reduce_dtype ==
        strategies::GradReduceDtype::Accumulation);
  std::string half = titan;
  half.replace(half.find("\"float32\"\n", half.find("mixed_precision_reduce")), 10, "\"float16\"\n");
  CHECK_THROWS_WITH_AS(import_plan(plain, ExportTarget::TorchTitan, half, "t.toml"),
                       doctest::Contains("t.toml: training.mixed_precision_reduce: must be \"float32\" or \"bfloat16\""),
                       InputError);
}

TEST_CASE("torchtitan: context parallelism's rotation, both ways, and Transformer Engine's all-gather listed") {
  // torch.distributed's "allgather" rotation (torchtitan's default) is
  // cp_comm all_gather_ring, "alltoall" the ring (p2p); a file without the
  // key reads as torchtitan's default. Transformer Engine's exposed
  // all-gather has no rotation of its own: "allgather" is written and the
  // plan's value listed; Megatron-Core has no PyTorch rotation (listed).
  auto plan = [](const std::string& cp_comm) {
    return scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
        "batch": {"global": 8, "micro": 1}, "plan": {"dp": 4, "cp": 2, "zero": 3, "precision": "bf16",
        "implementation": {"cp_comm": ")" + cp_comm + R"("}}})");
  };
  auto round_trip = [&](const std::string& cp_comm) {
    const Exported ex = export_torchtitan(plan(cp_comm));
    return std::pair{ex.text, import_plan(plan(cp_comm), ExportTarget::TorchTitan, ex.text, "t.toml")
                                  .scenario.plan.implementation.cp_comm};
  };
  const auto [ring_text, ring] = round_trip("p2p");
  CHECK(contains(ring_text, "context_parallel_rotate_method = \"alltoall\"\n"));
  CHECK(ring == strategies::CpComm::P2p);
  const auto [torch_text, torch] = round_trip("all_gather_ring");
  CHECK(contains(torch_text, "context_parallel_rotate_method = \"allgather\"\n"));
  CHECK(torch == strategies::CpComm::AllGatherRing);
  CHECK(unsupported(export_torchtitan(plan("all_gather")), "implementation.cp_comm=all_gather") != "");
  CHECK(unsupported(export_torchtitan(plan("all_gather_ring")), "implementation.cp_comm") == "");
  CHECK(unsupported(export_megatron(plan("all_gather_ring")), "implementation.cp_comm=all_gather_ring") != "");
  std::string unstated = ring_text;
  unstated.erase(unstated.find("context_parallel_rotate_method"), std::string("context_parallel_rotate_method = \"alltoall\"\n").size());
  CHECK(import_plan(plan("p2p"), ExportTarget::TorchTitan, unstated, "t.toml").scenario.plan.implementation.cp_comm ==
        strategies::CpComm::AllGatherRing);
  std::string bad = ring_text;
  bad.replace(bad.find("\"alltoall\""), 10, "\"ring\"");
  CHECK_THROWS_WITH_AS(import_plan(plan("p2p"), ExportTarget::TorchTitan, bad, "t.toml"),
                       doctest::Contains("t.toml: parallelism.context_parallel_rotate_method: must be \"allgather\" or "
                                         "\"alltoall\""),
                       InputError);
}

TEST_CASE("torchtitan: the loss under loss_parallel with tp, disabled by its flag, both ways") {
  // torchtitan computes its loss under loss_parallel whenever tp > 1
  // (ParallelDims.loss_parallel_enabled) unless parallelism.
  // disable_loss_parallel: cross_entropy parallel is its default there,
  // unfused the flag; with tp 1 the loss is F.cross_entropy (unfused) and
  // parallel has no flag (listed).
  auto plan = [](int tp, const std::string& ce) {
    return scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 1},
        "batch": {"global": 8, "micro": 1}, "plan": {"dp": )" + std::to_string(8 / tp) + R"(, "tp": )" +
                    std::to_string(tp) + R"(, "sequence_parallel": )" + (tp > 1 ? "true" : "false") +
                    R"(, "zero": 3, "precision": "bf16", "implementation": {"cross_entropy": ")" + ce + R"("}}})");
  };
  auto round_trip = [&](int tp, const std::string& ce) {
    const Exported ex = export_torchtitan(plan(tp, ce));
    return std::pair{ex, import_plan(plan(tp, ce), ExportTarget::TorchTitan, ex.text, "t.toml")
                             .scenario.plan.implementation.cross_entropy};
  };
  const auto [parallel, parallel_back] = round_trip(2, "parallel");
  CHECK(!contains(parallel.text, "disable_loss_parallel"));
  CHECK(unsupported(parallel, "implementation.cross_entropy") == "");
  CHECK(parallel_back == strategies::CrossEntropy::Parallel);
  const auto [unfused, unfused_back] = round_trip(2, "unfused");
  CHECK(contains(unfused.text, "disable_loss_parallel = true\n"));
  CHECK(unsupported(unfused, "implementation.cross_entropy") == "");
  CHECK(unfused_back == strategies::CrossEntropy::Unfused);
  const auto [plain, plain_back] = round_trip(1, "unfused");
  CHECK(!contains(plain.text, "disable_loss_parallel"));
  CHECK(plain_back == strategies::CrossEntropy::Unfused);
  CHECK(unsupported(export_torchtitan(plan(1, "parallel")), "implementation.cross_entropy=parallel") != "");
  CHECK(unsupported(export_torchtitan(plan(2, "in_place")), "implementation.cross_entropy=in_place") != "");
}

TEST_CASE("torchtitan: GPT-3 175B, interleaved 1F1B with split points") {
  const auto e = export_torchtitan(gpt3());
  const auto& t = e.text;
  // ZeRO-1 has no torchtitan equivalent (FSDP shards gradients and
  // parameters): the nearest, never resharding (ZeRO-2), is emitted and listed.
  CHECK(contains(t, "\n[parallelism]\n"));
  CHECK(contains(t, "data_parallel_replicate_degree = 1\n"));
  CHECK(contains(t, "data_parallel_shard_degree = 16\n"));
  CHECK(contains(t, "fsdp_reshard_after_forward = \"never\"\n"));
  CHECK(unsupported(e, "zero=1") != "");
  CHECK(contains(t, "tensor_parallel_degree = 8\n"));
  CHECK(contains(t, "pipeline_parallel_degree = 8\n"));
  CHECK(contains(t, "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"));
  // 32 chunks of 3 layers: 31 split points, layers.3 … layers.93.
  CHECK(contains(t, "pipeline_parallel_split_points = [\"layers.3\", \"layers.6\", "));
  CHECK(contains(t, "\"layers.90\", \"layers.93\"]\n"));
  CHECK(contains(t, "pipeline_parallel_microbatch_size = 1\n"));
  CHECK(contains(t, "context_parallel_degree = 1\n"));
  // With pipelining the local batch is the replica's share: 1536 / 16 = 96.
  CHECK(contains(t, "\n[training]\nlocal_batch_size = 96\nglobal_batch_size = 1536\nseq_len = 2048\n"));
  CHECK(contains(t, "mixed_precision_param = \"bfloat16\"\n"));
  // Megatron-LM's selective policy keeps everything under flash attention:
  // torchtitan's mode "none", said in a note.
  CHECK(contains(t, "\n[activation_checkpoint]\nmode = \"none\"\n"));
  CHECK(std::any_of(e.notes.begin(), e.notes.end(),
                    [](const std::string& n) { return contains(n, "recompute=selective"); }));
  CHECK(unsupported(e, "recompute") == "");
  CHECK(contains(t, "\n[optimizer]\nname = \"Adam\"\n"));
}

TEST_CASE("selective_op is torchtitan's op-level checkpointing: exact there, refused by the others") {
  strategies::Scenario sc = llama_zero3(1);
  sc.plan.recompute = cost::Recompute::SelectiveOp;
  const auto t = export_torchtitan(sc);
  CHECK(contains(t.text, "\n[activation_checkpoint]\nmode = \"selective\"\nselective_ac_option = \"op\"\n"));
  CHECK(unsupported(t, "recompute") == "");
  CHECK(unsupported(export_megatron(sc), "recompute=selective_op") != "");
  CHECK(unsupported(export_deepspeed(sc), "recompute=selective_op") != "");
}

TEST_CASE("torchtitan: ZeRO-3 with full offload is FSDP resharding after forward") {
  // The loss as torchtitan computes it (export_plan gives a plan the
  // stack's settings it does not fix itself; this calls the exporter alone).
  strategies::Scenario sc = llama_zero3(1);
  sc.plan.implementation.cross_entropy = cost::CrossEntropy::Unfused;
  sc.plan.implementation.sp_regather_input = false;  // DTensor's linears, as the stack says
  sc.plan.implementation.tp_grad_overlap = false;
  const auto e = export_torchtitan(sc);
  const auto& t = e.text;
  CHECK(contains(t, "data_parallel_shard_degree = 8\n"));
  CHECK(contains(t, "fsdp_reshard_after_forward = \"always\"\n"));
  CHECK(contains(t, "enable_cpu_offload = true\n"));
  CHECK(contains(t, "mode = \"full\"\n"));
  CHECK(contains(t, "name = \"AdamW\"\n"));
  // Without pipelining the local batch is one microbatch: 1.
  CHECK(contains(t, "local_batch_size = 1\n"));
  CHECK(e.unsupported.empty());
  // Megatron-LM's in-place loss is not torchtitan's, nor torchtitan's Megatron-LM's.
  CHECK(unsupported(export_torchtitan(llama_zero3(1)), "implementation.cross_entropy=in_place") != "");
  CHECK(unsupported(export_megatron(sc), "implementation.cross_entropy=unfused") != "");
  // Megatron-LM's linears gather their input again; DTensor's keep it.
  CHECK(unsupported(export_megatron(sc), "implementation.sp_regather_input=false") != "");
  CHECK(unsupported(export_torchtitan(llama_zero3(1)), "implementation.sp_regather_input=true") != "");
  CHECK(unsupported(export_torchtitan(llama_zero3(1)), "implementation.tp_grad_overlap=true") != "");
}

// A fresh directory per test case (test cases may run in parallel processes).
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("strata-export-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& sub) const { return (path / sub).string(); }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

const std::string kGpt2 = std::string(STRATA_SOURCE_DIR) + "/configs/scenarios/gpt2-124m-1gpu.json";

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// GPT-2 small on one A100 explored over two recompute policies into DIR
// (its scenario in DIR/sweep.json): a directory with two top plans.
nlohmann::json explore_two(const TempDir& d) {
  const std::string path = d / "sweep.json";
  write(path, R"({"model": "gpt2-124m", "cluster": "1xa100-80g", "batch": {"global": 32, "micro": 8},
      "plan": {"optimizer": "adamw", "precision": "bf16"}, "space": {"recompute": ["full", "selective"]}})");
  ExploreRunOptions o;
  o.out_dir = d / "out";
  o.jobs = 1;
  run_explore(strategies::load_scenario(path), o);
  auto s = nlohmann::json::parse(read_text(d / "out/summary.json"));
  REQUIRE(s["top"].size() == 2);
  return s;
}

Recompute recompute_of(const nlohmann::json& record) {
  return record["plan"]["recompute"] == "full" ? Recompute::Full : Recompute::Selective;
}

// The round trip: for 8,000 plans drawn at random (every axis export reads) on two
// models, every export an engine can launch and that lists nothing as not
// expressible is read back by import_plan to the plan export rendered
// (Exported::rendered: the scenario's plan with the engine's defaults),
// compared by canonical JSON. Where an export writes the nearest setting
// and says so in a note, the comparison reads the plan as the engine runs
// it (`as_engine_reads`); each such case is listed there.
strategies::Plan as_engine_reads(strategies::Plan p, ExportTarget e, std::int64_t segment) {
  using strategies::TpCommOverlap;
  // Megatron-LM and DeepSpeed checkpoint uniform segments; sqrt is the
  // segment of ceil(sqrt(layers per chunk)) layers, full is a segment of one
  // (export's recompute_segment).
  if (e == ExportTarget::Megatron && (p.recompute == Recompute::Sqrt || p.recompute == Recompute::EveryK)) {
    p.recompute = segment == 1 ? Recompute::Full : Recompute::EveryK;
    p.recompute_k = segment;
  }
  // Megatron-LM reduces in its main_grad buffer's dtype (a reduction set
  // apart from it is listed as inexpressible): the same dtype named
  // explicitly reads back as the accumulation's.
  if (e == ExportTarget::Megatron) p.implementation.grad_reduce_dtype = strategies::GradReduceDtype::Accumulation;
  if (e == ExportTarget::TorchTitan) {
    // Megatron's attention-core policy keeps everything under flash
    // attention: torchtitan's mode "none" (a note says so).
    if (p.recompute == Recompute::Selective) p.recompute = Recompute::None;
    // No FSDP with one data-parallel rank (a note).
    if (p.dp * p.cp == 1) p.zero = 0;
    // torchtitan keeps the sharded gradients in fp32 whatever the plan says
    // (a note) and reduces them in the plan's reduction dtype
    // (mixed_precision_reduce).
    if (p.precision != cost::Precision::FP32) {
      const bool half = strategies::reduced_grad_bytes(p) == 2;
      p.implementation.fp32_grad_accumulation = true;
      p.implementation.grad_reduce_dtype =
          half ? strategies::GradReduceDtype::BF16 : strategies::GradReduceDtype::Accumulation;
    }
    // Async tensor parallelism is one mode; it compiles the model.
    if (p.implementation.tp_comm_overlap != TpCommOverlap::None) {
      p.implementation.tp_comm_overlap = TpCommOverlap::Ring;
      p.implementation.fused_elementwise = true;
    }
  }
  return p;
}

TEST_CASE("export round trip: import_plan reads every launchable export back to the plan it rendered") {
  using strategies::OffloadTarget;
  using strategies::Optimizer;
  using strategies::Schedule;
  using strategies::TpCommOverlap;
  std::mt19937_64 rng(20261204), rng_deepspeed(20261207);
  auto pick = [&](auto... v) {
    const std::array a{v...};
    return a[std::uniform_int_distribution<std::size_t>(0, a.size() - 1)(rng)];
  };
  // llama3-8b: 32 layers, GQA, RoPE, untied; gpt2-124m: 12 layers, learned
  // positions, tied, biases. 16 GPUs each.
  const std::array bases{
      scenario(R"({"model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 2},
                   "batch": {"global": 64, "micro": 1}, "plan": {"dp": 16}})"),
      scenario(R"({"model": "gpt2-124m", "cluster": {"preset": "dgx-h100", "nodes": 2},
                   "batch": {"global": 64, "micro": 1}, "plan": {"dp": 16}})")};
  std::map<ExportTarget, int> tripped, refused, inexpressible;
  std::map<ExportTarget, int> nvme_weights;
  for (int draw = 0; draw < 10000; ++draw) {
    strategies::Scenario sc = bases[static_cast<std::size_t>(draw % 2)];
    auto& p = sc.plan;
    p.tp = pick(1, 2, 4);
    p.pp = pick(1, 2, 4);
    p.cp = pick(1, 1, 2);
    p.dp = 16 / (p.tp * p.pp * p.cp);
    if (p.dp < 1) continue;
    p.zero = pick(0, 1, 2, 3);
    p.schedule = pick(Schedule::OneFOneB, Schedule::OneFOneB, Schedule::Interleaved, Schedule::GPipe);
    p.virtual_stages = p.schedule == Schedule::Interleaved ? pick(2, 3) : 1;
    if (p.pp == 1) p.schedule = Schedule::OneFOneB, p.virtual_stages = 1;
    // (One chunk holds the embedding and the head either way at pp = 1.)
    if (p.pp > 1)
      p.pipeline_layout = pick(strategies::PipelineLayout::Balanced, strategies::PipelineLayout::EmbeddingHeadAsLayers);
    p.sequence_parallel = p.tp > 1 && pick(true, true, false);
    p.recompute = pick(Recompute::None, Recompute::Selective, Recompute::Full, Recompute::EveryK, Recompute::Sqrt,
                       Recompute::EveryNth, Recompute::SelectiveOp);
    p.recompute_k = pick(2, 3);
    using cost::RecomputeModule;
    if (p.recompute == Recompute::Selective)
      p.recompute_modules = pick(cost::kDefaultRecomputeModules,
                                 static_cast<cost::RecomputeModules>(cost::kDefaultRecomputeModules |
                                                                     cost::module_bit(RecomputeModule::Layernorm)),
                                 cost::module_bit(RecomputeModule::Layernorm));
    p.offload.activations = pick(false, false, false, true);
    p.optimizer_states = pick(strategies::StateDtype::FP32, strategies::StateDtype::FP32, strategies::StateDtype::FP32,
                              strategies::StateDtype::FP32, strategies::StateDtype::FP32, strategies::StateDtype::BF16);
    p.offload.weights = pick(false, false, false, true);
    p.offload.weights_target = pick(OffloadTarget::Cpu, OffloadTarget::Nvme);
    p.offload.optimizer = pick(OffloadTarget::None, OffloadTarget::None, OffloadTarget::Cpu, OffloadTarget::Nvme);
    p.optimizer = pick(Optimizer::Adam, Optimizer::AdamW, Optimizer::AdamW, Optimizer::Sgd, Optimizer::Momentum,
                       Optimizer::Lamb);
    p.precision = pick(cost::Precision::BF16, cost::Precision::BF16, cost::Precision::FP16, cost::Precision::FP32,
                       cost::Precision::FP8);
    if (p.precision == cost::Precision::FP8)
      p.fp8_recipe = pick(cost::Fp8Recipe::Delayed, cost::Fp8Recipe::Tensorwise, cost::Fp8Recipe::Blockwise,
                          cost::Fp8Recipe::Rowwise);
    sc.batch.micro = pick(1, 2);
    auto& im = p.implementation;
    auto fix = [&](strategies::ImplKey k) { sc.implementation_keys.add(k); };
    if (pick(false, true)) im.overlap_grad_reduce = pick(false, true), fix(strategies::ImplKey::OverlapGradReduce);
    if (p.zero >= 1 && pick(false, true))
      im.overlap_param_gather = pick(false, true), fix(strategies::ImplKey::OverlapParamGather);
    if (p.sequence_parallel && pick(false, true))
      im.tp_comm_overlap = pick(TpCommOverlap::Bulk, TpCommOverlap::Ring), fix(strategies::ImplKey::TpCommOverlap);
    if (p.precision != cost::Precision::FP32 && pick(false, true))
      im.fp32_grad_accumulation = pick(false, true), fix(strategies::ImplKey::Fp32GradAccumulation);
    if (p.precision != cost::Precision::FP32 && pick(false, false, true)) {
      using strategies::GradReduceDtype;
      im.grad_reduce_dtype = pick(GradReduceDtype::FP32, p.precision == cost::Precision::FP16 ? GradReduceDtype::FP16
                                                                                              : GradReduceDtype::BF16);
      fix(strategies::ImplKey::GradReduceDtype);
    }
    if (pick(false, false, true)) im.fused_elementwise = false, fix(strategies::ImplKey::FusedElementwise);
    if (p.cp > 1 && pick(false, true))
      im.cp_comm = pick(strategies::CpComm::P2p, strategies::CpComm::AllGather, strategies::CpComm::AllGatherRing),
      fix(strategies::ImplKey::CpComm);
    if (p.precision == cost::Precision::FP8 && p.zero >= 1 && p.zero <= 2 && pick(false, true))
      im.fp8_param_gather = true, fix(strategies::ImplKey::Fp8ParamGather);
    // DeepSpeed's ZeRO-3 settings, where they act, drawn from a stream of
    // their own (the draws above stay as they were).
    if (p.zero == 3 && p.dp * p.cp > 1) {
      auto pick2 = [&](auto... v) {
        const std::array a{v...};
        return a[std::uniform_int_distribution<std::size_t>(0, a.size() - 1)(rng_deepspeed)];
      };
      if (pick2(false, false, true))
        im.zero3_reduce_bucket = pick2(0, 200'000'000, 500'000'000), fix(strategies::ImplKey::Zero3ReduceBucket);
      if (pick2(false, false, true)) {
        im.zero3_max_live = pick2(0, 300'000'000, 1'000'000'000), fix(strategies::ImplKey::Zero3MaxLive);
        if (im.zero3_max_live > 0) {  // (the other two act only through it)
          im.zero3_prefetch_bucket = pick2(0, 50'000'000), fix(strategies::ImplKey::Zero3PrefetchBucket);
          im.zero3_reuse_distance = pick2(0, 1'000'000'000), fix(strategies::ImplKey::Zero3ReuseDistance);
        }
      }
    }
    try {
      strategies::require_valid_plan(sc);
    } catch (const InputError&) {
      continue;
    }
    for (auto e : {ExportTarget::Megatron, ExportTarget::DeepSpeed, ExportTarget::TorchTitan}) {
      Exported ex;
      try {
        ex = export_plan(sc, e);
      } catch (const InputError&) {
        ++refused[e];
        continue;
      }
      if (!ex.unsupported.empty()) {
        ++inexpressible[e];
        continue;
      }
      const auto back = import_plan(sc, e, ex.text, "exported");
      const auto chunks = strategies::chunk_layers(ex.rendered, sc.model.layers);
      const std::int64_t segment = strategies::recompute_segment(
          ex.rendered, *std::max_element(chunks.begin(), chunks.end()));
      // The chunks' layers compared as lists: a layout that splits as the
      // balanced one does is the same plan.
      CHECK(strategies::chunk_layers(back.scenario.plan, sc.model.layers) == chunks);
      auto want_plan = as_engine_reads(ex.rendered, e, segment), got_plan = back.scenario.plan;
      for (auto* q : {&want_plan, &got_plan}) {
        q->stage_layers.clear();
        q->pipeline_layout = strategies::PipelineLayout::Balanced;
      }
      const std::string want = strategies::canonical_json(want_plan, sc.batch);
      const std::string got = strategies::canonical_json(got_plan, back.scenario.batch);
      INFO(enum_name(e), "\n", ex.text, "\nwant ", want, "\ngot  ", got);
      REQUIRE(got == want);
      ++tripped[e];
      nvme_weights[e] += p.offload.weights && p.offload.weights_target == OffloadTarget::Nvme;
    }
  }
  for (auto e : {ExportTarget::Megatron, ExportTarget::DeepSpeed, ExportTarget::TorchTitan}) {
    MESSAGE(enum_name(e), ": ", tripped[e], " round trips, ", refused[e], " refused, ", inexpressible[e],
            " with settings the engine cannot express");
    CHECK(tripped[e] >= 100);
  }
  // ZeRO-Infinity's parameters on NVMe: DeepSpeed's offload_param device.
  CHECK(nvme_weights[ExportTarget::DeepSpeed] >= 10);
}

TEST_CASE("import: bad input names the file, the flag or key, and the rule") {
  const auto sc = gpt3();
  auto fails = [&](ExportTarget e, const std::string& text, const std::string& what) {
    CHECK_THROWS_WITH_AS(import_plan(sc, e, text, "in.txt"), doctest::Contains(what.c_str()), InputError);
  };
  fails(ExportTarget::Megatron, "--num-layers 80 --tensor-model-parallel-size 8", "in.txt: --num-layers: is 80, the scenario's model has 96 [import-model]");
  fails(ExportTarget::Megatron, "--tensor-model-parallel-size 3", "[import-world]");
  fails(ExportTarget::Megatron, "--bf16 --bf16", "--bf16: is given twice [import-syntax]");
  fails(ExportTarget::Megatron, "--tensor-model-parallel-size x", "'x' is not a non-negative integer [import-value]");
  fails(ExportTarget::DeepSpeed, "{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage: must be 0 to 3");
  fails(ExportTarget::DeepSpeed, "[1", "in.txt: invalid JSON");
  fails(ExportTarget::DeepSpeed, "{\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp16\"}",
        "in.txt: communication_data_type: is fp16 while the config trains in bf16: a 16-bit reduction is the "
        "training's own 16-bit dtype [import-value]");
  fails(ExportTarget::DeepSpeed, "{\"fp16\": {}, \"fp16\": {}}", "fp16");  // a key twice
  fails(ExportTarget::Megatron, "--optimizer adam --weight-decay x", "--weight-decay: 'x' is not a number");
  fails(ExportTarget::Megatron, "--recompute-granularity full --recompute-num-layers 0",
        "--recompute-num-layers: 0 is not in [1, 100000] [import-value]");
  fails(ExportTarget::Megatron, "--tensor-model-parallel-size 8 --context-parallel-size 2 --cp-comm-type a2a",
        "--cp-comm-type: 'a2a' is not p2p or all_gather (all-to-all context parallelism is not modelled)");
  fails(ExportTarget::Megatron, "--tensor-model-parallel-size 8 --context-parallel-size 2 --cp-comm-type p2p all_gather",
        "--cp-comm-type: 'p2p all_gather' gives layers different types");
  fails(ExportTarget::TorchTitan, "[parallelism]\ntensor_parallel_degree = 8\n", "[import-world]");
  fails(ExportTarget::TorchTitan, "[parallelism]\ntensor_parallel_degree = \n", "line 2");
  fails(ExportTarget::TorchTitan,
        "[parallelism]\ndata_parallel_shard_degree = 16\ntensor_parallel_degree = 8\n"
        "pipeline_parallel_degree = 8\n[training]\nlocal_batch_size = 96\nglobal_batch_size = 1536\n"
        "seq_len = 2048\n[activation_checkpoint]\nmode = \"some\"\n",
        "activation_checkpoint.mode: 'some' is not none, full or selective [import-value]");
}

TEST_CASE("import: what is not part of a plan is listed, and DeepSpeed's model parallelism comes from the scenario") {
  const auto sc = gpt3();
  const auto mg = import_plan(sc, ExportTarget::Megatron,
                              "torchrun pretrain_gpt.py --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
                              "--lr 1e-4 --data-path /d \\\n --bf16 --micro-batch-size 1 --global-batch-size 1536",
                              "cmd.sh");
  CHECK(mg.scenario.plan.dp == 16);  // 1024 / (8 x 8)
  CHECK(mg.scenario.plan.precision == cost::Precision::BF16);
  CHECK(mg.ignored == std::vector<std::string>{"--data-path", "--lr"});
  const auto ds = import_plan(sc, ExportTarget::DeepSpeed,
                              R"({"train_batch_size": 1536, "train_micro_batch_size_per_gpu": 1,
                                  "zero_optimization": {"stage": 1}, "steps_per_print": 10})",
                              "ds.json");
  CHECK(ds.scenario.plan.tp == 8);  // the scenario's
  CHECK(ds.scenario.plan.pp == 8);
  CHECK(ds.scenario.plan.zero == 1);
  CHECK(ds.ignored == std::vector<std::string>{"steps_per_print"});
  CHECK(ds.from_base.size() == 1);
}

TEST_CASE("load_export_scenario: a scenario file, and a directory's top plans by rank") {
  // A scenario file is read as `strata simulate` reads it.
  const auto sc = load_export_scenario(kGpt2);
  CHECK(sc.model.name == "gpt2-124m");
  CHECK(sc.batch.micro == 8);

  TempDir d("rank");
  const auto s = explore_two(d);
  // Rank 1 is the first of `top` (the best by throughput), rank 2 the next.
  CHECK(load_export_scenario(d / "out").plan.recompute == recompute_of(s["top"][0]));
  CHECK(load_export_scenario(d / "out", 2).plan.recompute == recompute_of(s["top"][1]));
  CHECK(testing::input_error_of([&] { load_export_scenario(d / "out", 3); }) ==
        d / "out/summary.json" + ": top: holds 2 plans; --rank 3 asks for plan 3 (explore --top K "
                                 "keeps more)");
}

TEST_CASE("load_export_scenario: the scenario of a directory: --scenario, DIR/scenario.json, the path") {
  // A directory of an older strata (no manifest, no scenario copy) whose
  // recorded scenario path does not resolve.
  TempDir d("moved");
  auto s = explore_two(d);
  fs::create_directories(d / "moved");
  s["scenario"] = "/nonexistent/sweep.json";
  write(d / "moved/summary.json", s.dump());
  for (const char* f : {"results.jsonl", "refined.jsonl"})
    if (fs::exists(d / "out/" + f)) fs::copy_file(d / "out/" + f, d / "moved/" + f);
  const std::string moved = d / "moved";
  // The directory holds no model or cluster: the error says which flag gives them.
  const auto err = testing::input_error_of([&] { load_export_scenario(moved); });
  CHECK(err == d / "moved/summary.json" + ": scenario: neither " + d / "moved/scenario.json" +
                   " nor the explored scenario \"/nonexistent/sweep.json\" is found from here, "
                   "and the summary holds no model or cluster: pass --scenario FILE (the "
                   "explored scenario)");
  const auto want = recompute_of(s["top"][0]);
  // With --scenario it is read from there…
  CHECK(load_export_scenario(moved, 1, d / "sweep.json").plan.recompute == want);
  // …or from the copy explore keeps beside its results (DIR/scenario.json).
  fs::copy_file(d / "sweep.json", d / "moved/scenario.json");
  CHECK(load_export_scenario(moved).plan.recompute == want);
  // It must be the explored model.
  s["model"] = "llama3-8b";
  write(d / "moved/summary.json", s.dump());
  CHECK(contains(testing::input_error_of([&] { load_export_scenario(moved); }),
                 ": model: the directory explored model \"llama3-8b\""));
}

TEST_CASE("load_export_scenario: bad input names the file, the path and the rule") {
  CHECK(testing::input_error_of([] { load_export_scenario("/nonexistent/plan.json"); }) ==
        "/nonexistent/plan.json: file not found");
  TempDir d("empty");
  CHECK(contains(testing::input_error_of([&] { load_export_scenario(d.path.string()); }),
                 "summary.json: file not found"));
  // A summary without its records is not an explore's.
  write(d / "summary.json", R"({"scenario": ")" + kGpt2 + R"(", "model": "gpt2-124m", "gpus": 1,
      "top": [{"batch": {"global": 32}, "plan": {"tp": 5}}]})");
  CHECK(contains(testing::input_error_of([&] { load_export_scenario(d.path.string()); }),
                 "results.jsonl: file not found"));
}

}  // namespace
}  // namespace strata::report
