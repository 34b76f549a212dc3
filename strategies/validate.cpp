#include "strategies/validate.hpp"

#include <algorithm>
#include <numeric>

#include "costmodel/ops.hpp"
#include "sim/limits.hpp"
#include "strategies/rank_mesh.hpp"

namespace strata::strategies {

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

using Check = std::optional<Violation>;
Check fail(std::string rule, std::string path, std::string message) {
  return Violation{std::move(rule), std::move(path), std::move(message)};
}

}  // namespace

std::optional<Violation> size_violation(const Scenario& s) {
  const auto& m = s.model;
  const auto& b = s.batch;
  if (m.chain) {
    // A layer chain: its parameters' states (16 bytes each: fp32 weights,
    // gradients, two Adam moments) and every stage's output, saved and
    // working bytes for the whole global batch, in doubles.
    double bytes = 16.0 * static_cast<double>(m.chain->params()) +
                   static_cast<double>(m.chain->input_bytes) * static_cast<double>(b.global);
    for (const auto& l : m.chain->layers)
      bytes += static_cast<double>(b.global) *
               (static_cast<double>(l.output_bytes) + static_cast<double>(l.saved_bytes) +
                static_cast<double>(l.workspace_bytes));
    if (!(bytes <= static_cast<double>(kMaxBytes)))
      return fail("size-limit", "model",
                  "the layer chain needs about " + str(static_cast<std::int64_t>(std::min(bytes, 9.2e18))) +
                      " bytes for its states and a step's activations; Strata counts at most 2^60 "
                      "bytes (1 EiB)");
    return std::nullopt;
  }
  if (const auto tokens = checked_mul(b.global, m.seq_len); !tokens || *tokens > kMaxTokensPerStep)
    return fail("tokens-per-step", "batch.global",
                "global × seq_len = " + str(b.global) + " × " + str(m.seq_len) +
                    " tokens per step; Strata models at most 2^40 (1,099,511,627,776)");
  // Every microbatch of the step on one pipeline (dp = 1): the most any plan keeps.
  const double microbatches = std::max<double>(1, static_cast<double>(b.global / b.micro));
  const auto attention = s.plan.implementation.attention;
  const auto bound = cost::size_bound(m, static_cast<double>(b.micro), microbatches,
                                      static_cast<double>(s.cluster.node.gpus_per_node), attention);
  if (!bound.countable())
    return fail("size-limit", bound.state_bytes > bound.activation_bytes ? "model" : "batch",
                bound.rule(str(static_cast<std::int64_t>(microbatches)) + " microbatches of " +
                           str(b.micro) + " × " + str(m.seq_len) + " tokens, " +
                           std::string(enum_name(attention)) + " attention"));
  return std::nullopt;
}

bool grad_reduce_dtype_allowed(GradReduceDtype d, Precision p) {
  if (d != GradReduceDtype::BF16 && d != GradReduceDtype::FP16) return true;
  return p != Precision::FP32 && (d == GradReduceDtype::FP16) == (p == Precision::FP16);
}

std::optional<Violation> first_violation(const Scenario& s) {
  const auto& m = s.model;
  const auto& c = s.cluster;
  const auto& p = s.plan;
  const auto& b = s.batch;

  if (auto v = size_violation(s)) return v;

  // --- parallel degrees against the cluster ---
  // Each degree is at most kMaxGpus; their product may not fit in 64 bits.
  if (const auto gpus = checked_product({p.dp, p.tp, p.pp, p.cp}); !gpus || *gpus != c.gpus())
    return fail("gpu-count", "plan",
                "dp·tp·pp·cp = " + str(p.dp) + "·" + str(p.tp) + "·" + str(p.pp) + "·" +
                    str(p.cp) + " = " + (gpus ? str(*gpus) : std::string("more than 2^63")) +
                    " does not equal the cluster's " + str(c.gpus()) + " GPUs (" +
                    str(c.nodes) + " nodes × " + str(c.node.gpus_per_node) + ")");

  // --- stragglers ---
  if (const auto& st = c.stragglers) {
    if (st->backup_replicas >= p.dp)
      return fail("stragglers-backup", "cluster.stragglers.backup_replicas",
                  str(st->backup_replicas) + " backup replicas need dp > " +
                      str(st->backup_replicas) + " (dp = " + str(p.dp) + ")");
    // One draw per GPU and sample: at most 2^30 in all (seconds of work).
    if (st->samples > (std::int64_t{1} << 30) / c.gpus())
      return fail("stragglers-size", "cluster.stragglers.samples",
                  str(st->samples) + " samples × " + str(c.gpus()) +
                      " GPUs exceed 2^30 draws; take fewer samples");
  }

  // --- layer-chain models: their stages are priced whole ---
  if (m.chain) {
    const std::string chain = "model \"" + m.name + "\" is a layer chain";
    if (p.tp > 1 || p.cp > 1 || p.ep > 1 || p.sequence_parallel)
      return fail("chain-parallelism", "plan",
                  chain + ": its stages are not split (tp, cp, ep = 1, no sequence parallelism): data and "
                          "pipeline parallelism split its batch and its stages");
    if (p.recompute == Recompute::Selective || p.recompute == Recompute::SelectiveOp)
      return fail("chain-recompute", "plan.recompute",
                  chain + ": a stage has no attention core or save list to recompute selectively (use "
                          "none, full, every_k, sqrt or optimal)");
    if (cost::quantized_gemms(p.precision))
      return fail("chain-fp8", "plan.precision",
                  chain + ": " + std::string(enum_name(p.precision)) +
                      " training multiplies a transformer's linear layers in FP8 or FP4, and a chain's "
                      "stages are given by their FLOPs, not their layers");
    if (p.pipeline_layout != PipelineLayout::Balanced)
      return fail("chain-pipeline-layout", "plan.pipeline_layout",
                  chain + ": its stages are split evenly (balanced) or as plan.stage_layers lists them; it has "
                          "no embedding or head to count as layers, and gpu_speed and gpu_memory weigh a "
                          "transformer's equal blocks");
    if (is_factored(p.optimizer))
      return fail("chain-factored-optimizer", "plan.optimizer",
                  chain + ": " + std::string(enum_name(p.optimizer)) +
                      " keeps statistics per weight-matrix shape, which a chain's stages do not give; use an "
                      "element-wise optimizer");
  }

  // --- tensor parallelism against the model ---
  if (m.heads % p.tp != 0)
    return fail("tp-divides-heads", "plan.tp",
                str(p.tp) + " does not divide heads=" + str(m.heads));
  if (m.kv_heads % p.tp != 0)
    return fail("tp-divides-kv-heads", "plan.tp",
                str(p.tp) + " does not divide kv_heads=" + str(m.kv_heads) +
                    " (each tensor-parallel rank needs whole key/value heads)");
  if (m.ffn_hidden % p.tp != 0)
    return fail("tp-divides-ffn", "plan.tp",
                str(p.tp) + " does not divide ffn_hidden=" + str(m.ffn_hidden));
  if (p.sequence_parallel && p.tp == 1)
    return fail("sp-needs-tp", "plan.sequence_parallel", "sequence parallelism needs tp > 1");
  if (p.sequence_parallel && (m.seq_len / p.cp) % p.tp != 0)
    return fail("sp-divides-seq", "plan.sequence_parallel",
                "tp=" + str(p.tp) + " does not divide the " + str(m.seq_len / p.cp) +
                    " tokens per context-parallel rank");

  // --- context parallelism ---
  if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0)
    return fail("cp-divides-seq", "plan.cp",
                "2·cp = " + str(2 * p.cp) + " does not divide seq_len=" + str(m.seq_len) +
                    " (ring attention splits the sequence into 2·cp balanced chunks)");

  // --- expert parallelism ---
  if (p.ep > 1 && !m.moe)
    return fail("ep-needs-moe", "plan.ep", "expert parallelism needs a mixture-of-experts model");
  if (p.ep > 1 && m.moe->experts % p.ep != 0)
    return fail("ep-divides-experts", "plan.ep",
                str(p.ep) + " does not divide experts=" + str(m.moe->experts));
  if (p.dp % p.ep != 0)
    return fail("ep-divides-dp", "plan.ep", str(p.ep) + " does not divide dp=" + str(p.dp));

  // Megatron's expert mesh refuses some rank orders (rank_mesh.hpp).
  if (auto why = RankMesh::violation(p, c.node.gpus_per_node))
    return fail("rank-mesh", "plan.implementation.rank_order", *why);

  // --- pipeline ---
  const bool interleaved = p.schedule == Schedule::Interleaved;
  if (interleaved && p.virtual_stages < 2)
    return fail("interleaved-needs-virtual-stages", "plan.virtual_stages",
                "the interleaved schedule needs virtual_stages >= 2");
  if (!interleaved && p.virtual_stages != 1)
    return fail("virtual-stages-need-interleaved", "plan.virtual_stages",
                "virtual_stages = " + str(p.virtual_stages) +
                    " needs schedule \"interleaved\"");
  if (interleaved && p.pp < 2)
    return fail("interleaved-needs-pp", "plan.schedule", "the interleaved schedule needs pp > 1");
  const std::int64_t chunks = p.pp * p.virtual_stages;
  if (p.stage_layers.empty()) {
    // Balanced: every chunk needs a layer; counting the embedding and the
    // head as layers, the first and last chunks may hold only them.
    const bool counted = p.pipeline_layout == PipelineLayout::EmbeddingHeadAsLayers;
    if (chunks > m.layers + (counted ? 2 : 0))
      return fail("chunks-exceed-layers", "plan.pp",
                  "pp·virtual_stages = " + str(chunks) + " pipeline chunks exceed layers=" +
                      str(m.layers) +
                      (counted ? " + 2 (the embedding and the head count as layers; each chunk needs one)"
                       : chunks <= m.layers + 2
                           ? " (each chunk needs at least one layer; pipeline_layout "
                             "\"embedding_head_as_layers\" lets the first and last hold only the "
                             "embedding and the head)"
                           : " (each chunk needs at least one layer)"));
  } else {
    if (static_cast<std::int64_t>(p.stage_layers.size()) != chunks)
      return fail("stage-layers-count", "plan.stage_layers",
                  "has " + str(static_cast<std::int64_t>(p.stage_layers.size())) +
                      " entries; needs pp·virtual_stages = " + str(chunks));
    // A chunk without blocks holds the embedding or the head: only the
    // first and the last chunk may (one chunk holding neither would only
    // pass its input on).
    for (std::int64_t k = 1; k + 1 < chunks; ++k)
      if (p.stage_layers[static_cast<std::size_t>(k)] == 0)
        return fail("stage-layers-empty-chunk", "plan.stage_layers[" + str(k) + "]",
                    "is 0: only the first chunk (the embedding alone) and the last (the output layer "
                    "and loss alone) may hold no transformer layer");
    const std::int64_t sum =
        std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), std::int64_t{0});
    if (sum != m.layers)
      return fail("stage-layers-sum", "plan.stage_layers",
                  "sums to " + str(sum) + "; must equal layers=" + str(m.layers));
  }

  // --- batch ---
  if (b.global % (p.dp * b.micro) != 0)
    return fail("batch-divisible", "batch.global",
                str(b.global) + " is not divisible by dp·micro = " + str(p.dp) + "·" +
                    str(b.micro) + " = " + str(p.dp * b.micro));

  // The step's task graph holds a few tasks per layer and microbatch (the
  // dp·micro product above is at most 2^20 · 2^40).
  if (const std::int64_t passes = microbatches(p, b) * (m.layers + 2); passes > kMaxLayerPasses)
    return fail("step-size", "batch.global",
                str(microbatches(p, b)) + " microbatches per pipeline × (" + str(m.layers) +
                    " layers + embedding and head) = " + str(passes) +
                    " layer passes per step; Strata simulates at most 2^20 (1,048,576): raise "
                    "batch.micro or dp, or lower batch.global");

  if (interleaved && microbatches(p, b) % p.pp != 0)
    return fail("interleaved-microbatches", "batch.global",
                "the interleaved schedule needs microbatches per pipeline (" +
                    str(microbatches(p, b)) + ") to be a multiple of pp=" + str(p.pp));

  // --- sharding, compression, optimizer ---
  if (p.zero > 0 && p.dp_topology == DpTopology::ParameterServer)
    return fail("zero-needs-allreduce", "plan.zero",
                "ZeRO shards over the data-parallel all-reduce group; dp_topology "
                "\"parameter_server\" has none");
  if (p.ps_staleness > 0 && p.dp_topology != DpTopology::ParameterServer)
    return fail("ps-staleness-needs-ps", "plan.ps_staleness",
                "bounded staleness is a parameter server's: set dp_topology \"parameter_server\" or ps_staleness 0");
  if (p.compression.method != CompressionMethod::None && p.zero >= 2)
    return fail("compression-vs-zero", "plan.compression.method",
                std::string(enum_name(p.compression.method)) +
                    (p.compression.method == CompressionMethod::TopK
                         ? " sends index/value pairs that need an all-gather"
                         : " compresses a full gradient all-reduce") +
                    "; ZeRO-" + str(p.zero) +
                    " reduce-scatters gradients instead (use zero <= 1)");

  // --- precision against the GPU ---
  if (c.gpu.peak_tflops(p.precision) <= 0)
    return fail("precision-supported", "plan.precision",
                std::string(enum_name(p.precision)) + " is not supported by " + c.gpu.name +
                    " (no " + std::string(enum_name(p.precision)) + " peak)");

  // --- the FP8 recipe (Transformer Engine's; Megatron-Core --fp8-recipe) ---
  if (p.fp8_recipe != cost::Fp8Recipe::Delayed) {
    const std::string recipe(enum_name(p.fp8_recipe));
    if (p.precision != Precision::FP8)
      return fail("fp8-recipe-needs-fp8", "plan.fp8_recipe",
                  "the " + recipe + " recipe scales FP8 operands; precision is " +
                      std::string(enum_name(p.precision)) + " (set precision \"fp8\", or leave fp8_recipe out)");
    const bool mx = p.fp8_recipe == cost::Fp8Recipe::Mxfp8;
    const bool per_tensor = p.fp8_recipe == cost::Fp8Recipe::Tensorwise;
    std::vector<const cost::GpuSpec*> gpus{&c.gpu};
    for (const auto& g : c.groups) gpus.push_back(&g.gpu);
    for (const cost::GpuSpec* g : gpus) {
      const auto has = g->fp8_block_scaling;
      if (per_tensor || has == cost::Fp8BlockScaling::Native || (!mx && has == cost::Fp8BlockScaling::Emulated))
        continue;
      return fail("fp8-recipe-supported", "plan.fp8_recipe",
                  recipe + (mx ? " needs tensor cores that read block scales (Blackwell)"
                               : " needs row- or block-scaled FP8 GEMMs (Hopper, emulated by cuBLAS 12.9+, or Blackwell)") +
                      "; " + g->name + "'s fp8_block_scaling is \"" + std::string(enum_name(has)) + "\"");
    }
  }

  // --- blocks kept in bf16 (Megatron-Core's --first-last-layers-bf16) ---
  if (p.bf16_first_layers > 0 || p.bf16_last_layers > 0) {
    if (!cost::quantized_gemms(p.precision))
      return fail("bf16-layers-need-quantized", "plan.bf16_layers",
                  "blocks kept in bf16 are the exception to fp8 or fp4 training; precision is " +
                      std::string(enum_name(p.precision)) + " (set precision \"fp8\" or \"fp4\", or leave bf16_layers out)");
    if (p.bf16_first_layers + p.bf16_last_layers > m.layers)
      return fail("bf16-layers-count", "plan.bf16_layers",
                  "first " + std::to_string(p.bf16_first_layers) + " + last " + std::to_string(p.bf16_last_layers) +
                      " exceed the model's " + std::to_string(m.layers) + " layers");
  }

  // --- FP8 parameters (Megatron-Core's --fp8-param-gather) ---
  if (p.implementation.fp8_param_gather &&
      (p.precision != Precision::FP8 || p.zero < 1 || p.zero > 2 || p.offload.weights ||
       p.fp8_recipe == cost::Fp8Recipe::Rowwise))
    return fail("fp8-param-gather", "plan.implementation.fp8_param_gather",
                "FP8 parameters gathered by the distributed optimizer need precision fp8 with a Transformer "
                "Engine recipe (not rowwise), zero 1 or 2 (Megatron-Core's distributed optimizer; its FSDP "
                "is not modelled) and weights on the GPU");

  // --- the dtype gradients are reduced in ---
  if (!grad_reduce_dtype_allowed(p.implementation.grad_reduce_dtype, p.precision))
    return fail("grad-reduce-dtype", "plan.implementation.grad_reduce_dtype",
                "a 16-bit reduction is the plan's own 16-bit dtype: fp16 under fp16, bf16 under bf16, fp8 and "
                "fp4; precision is " + std::string(enum_name(p.precision)) + " (use \"fp32\" or \"accumulation\")");

  // --- the optimizer's statistics in bf16 ---
  if (p.optimizer_states == StateDtype::BF16 &&
      (p.optimizer == Optimizer::Adam8bit || p.optimizer == Optimizer::Adam4bit ||
       p.optimizer == Optimizer::Adafactor || p.optimizer == Optimizer::Sm3 || p.optimizer == Optimizer::Sgd))
    return fail("optimizer-states-bf16", "plan.optimizer_states",
                std::string(enum_name(p.optimizer)) +
                    (p.optimizer == Optimizer::Sgd ? " keeps no statistics"
                                                   : " keeps its statistics in its own format (quantized or factored)") +
                    "; bf16 statistics apply to adam, adamw, lamb, momentum and lars");

  // --- what selective recompute reruns (Megatron-Core's recompute_modules) ---
  if (const auto mods = recompute_modules_of(p); mods != cost::kDefaultRecomputeModules) {
    using cost::RecomputeModule;
    for (const RecomputeModule whole : {RecomputeModule::Moe, RecomputeModule::SharedExperts})
      if (cost::has_module(mods, whole))
        return fail("recompute-module-not-modelled", "plan.recompute_modules",
                    "\"" + std::string(enum_name(whole)) +
                        "\" checkpoints a whole submodule, whose rerun repeats its tensor- and expert-parallel "
                        "communication, which Strata does not price; use core_attn, layernorm, mla_up_proj, "
                        "moe_act or (tp 1) mlp");
    if (cost::has_module(mods, RecomputeModule::Mlp) && p.tp > 1)
      return fail("recompute-module-not-modelled", "plan.recompute_modules",
                  "\"mlp\" reruns the MLP with its tensor-parallel reduction, which Strata does not price again; "
                  "it is priced with tp 1");
    // Megatron-Core's recompute_mlp checkpoints dense MLPs only: a model
    // whose every block has routed experts has none to rerun.
    // (Every block has them only with first_dense 0 and no other pattern.)
    if (cost::has_module(mods, RecomputeModule::Mlp) && m.moe && m.moe_blocks() == m.layers)
      return fail("recompute-module-no-dense-mlp", "plan.recompute_modules",
                  "\"mlp\" reruns dense MLPs; every block of " + m.name +
                      " has routed experts (moe.first_dense is 0), so it would change nothing");
    if (cost::has_module(mods, RecomputeModule::MlaUpProj) && !m.mla)
      return fail("recompute-module-needs-mla", "plan.recompute_modules",
                  "mla_up_proj reruns multi-head latent attention's up-projections; " + m.name + " has none");
    if (cost::has_module(mods, RecomputeModule::MoeAct) && !m.moe)
      return fail("recompute-module-needs-moe", "plan.recompute_modules",
                  "moe_act reruns the routed experts' activation; " + m.name + " has no experts");
  }

  // --- the kept layer inputs split over tp (Megatron-LM's
  // --distribute-saved-activations, DeepSpeed's partition_activations) ---
  if (p.partition_activations) {
    if (p.tp < 2)
      return fail("partition-activations-needs-tp", "plan.partition_activations",
                  "splits the layer inputs recomputed segments keep over the tp ranks: needs tp > 1");
    if (p.sequence_parallel)
      return fail("partition-activations-not-with-sp", "plan.partition_activations",
                  "with sequence parallelism each tp rank keeps 1/tp of a layer's input already, so it would "
                  "change nothing (Megatron-LM uses it only without: distribute_saved_activations and not "
                  "sequence_parallel)");
    if (p.recompute == Recompute::None || p.recompute == Recompute::Selective ||
        p.recompute == Recompute::SelectiveOp)
      return fail("partition-activations-needs-recompute", "plan.partition_activations",
                  "splits the layer inputs recomputed segments keep; recompute \"" +
                      std::string(enum_name(p.recompute)) +
                      "\" keeps none (use full, every_k, sqrt, every_nth or optimal)");
  }

  // --- how a MoE model's tokens are routed ---
  if (!(p.moe == MoeRouting{}) && !m.moe)
    return fail("moe-routing-needs-moe", "plan.moe", "routes tokens to experts: " + m.name + " has none");

  // --- offload ---
  if (p.offload.planner != OffloadPlanner::All && !p.offload.activations)
    return fail("planner-needs-activation-offload", "plan.offload.planner",
                "an offload planner needs offload.activations = true");
  if (p.offload.planner == OffloadPlanner::Joint && p.recompute != Recompute::Optimal)
    return fail("joint-needs-optimal-recompute", "plan.offload.planner",
                "the joint planner decides recompute and offload together: it needs recompute "
                "\"optimal\"");
  if (p.offload.planner == OffloadPlanner::Vdnn && p.recompute == Recompute::SelectiveOp)
    return fail("vdnn-not-selective-op", "plan.offload.planner",
                "the vdnn planner moves each layer's linear-layer inputs, which recompute \"selective_op\" "
                "does not keep (it keeps torchtitan's save list: outputs of every other matrix product and "
                "of attention); use planner \"all\" or another recompute policy");
  if (p.offload.optimizer == OffloadTarget::Nvme && c.node.nvme_GiB <= 0)
    return fail("nvme-needed", "plan.offload.optimizer",
                "offload to NVMe needs a cluster with nvme_GiB > 0");
  if (p.offload.weights && p.offload.weights_target == OffloadTarget::Nvme) {
    if (c.node.nvme_GiB <= 0)
      return fail("nvme-needed", "plan.offload.weights", "offload to NVMe needs a cluster with nvme_GiB > 0");
    // ZeRO-Infinity steps the weights on the host and writes them back to
    // NVMe; a GPU step would need them resident.
    if (p.offload.optimizer == OffloadTarget::None)
      return fail("nvme-weights-step", "plan.offload.weights",
                  "weights on NVMe are stepped on the host: set offload.optimizer to cpu or nvme");
  }

  // --- what the scenario's stack can launch (its capabilities) ---
  if (s.stack)
    if (auto v = launch_violation(*s.stack, p)) return v;
  return std::nullopt;
}

}  // namespace strata::strategies
