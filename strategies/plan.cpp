#include "strategies/plan.hpp"

#include <algorithm>
#include <cmath>

namespace strata::strategies {

std::vector<std::int64_t> chunk_layers(const Plan& plan, std::int64_t layers) {
  if (!plan.stage_layers.empty()) return plan.stage_layers;
  const std::int64_t chunks = plan.pp * plan.virtual_stages;
  const bool counted = plan.pipeline_layout == PipelineLayout::EmbeddingHeadAsLayers;
  // Under EmbeddingHeadAsLayers the embedding and the head are two more units.
  const std::int64_t units = layers + (counted ? 2 : 0);
  std::vector<std::int64_t> out(static_cast<std::size_t>(chunks), units / chunks);
  // The remainder goes to the middle chunks: the first and last stages also
  // hold the embedding and the head.
  const std::int64_t extra = units % chunks;
  const std::int64_t start = (chunks - extra) / 2;
  for (std::int64_t i = 0; i < extra; ++i) out[static_cast<std::size_t>(start + i)] += 1;
  if (counted) {
    // The first and last units are the embedding and the head (one chunk
    // holds both at pp · v = 1).
    out.front() -= 1;
    out.back() -= 1;
  }
  return out;
}

std::int64_t sparse_k(double ratio, std::int64_t n) {
  if (n <= 0) return 0;
  const auto k = static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<std::int64_t>(k, 1, n);
}

cost::ExpandOptions expand_options(const Plan& plan, const Batch& batch) {
  cost::ExpandOptions o;
  o.micro_batch = batch.micro;
  o.tp = plan.tp;
  o.sequence_parallel = plan.sequence_parallel;
  o.sp_regather_input = plan.implementation.sp_regather_input;
  o.cp = plan.cp;
  o.ep = plan.ep;
  o.precision = plan.precision;
  o.fp8_recipe = plan.fp8_recipe;
  o.bf16_first_layers = plan.bf16_first_layers;
  o.bf16_last_layers = plan.bf16_last_layers;
  o.attention = plan.implementation.attention;
  o.fused_elementwise = plan.implementation.fused_elementwise;
  o.cross_entropy = plan.implementation.cross_entropy;
  o.train_metric_passes = plan.implementation.train_metric_passes;
  o.recompute_modules = recompute_modules_of(plan);
  o.expert_load = plan.moe.load();
  return o;
}

cost::RecomputeModules recompute_modules_of(const Plan& plan) {
  return plan.recompute == cost::Recompute::Selective ? plan.recompute_modules : cost::kDefaultRecomputeModules;
}

std::int64_t microbatches(const Plan& plan, const Batch& batch) {
  return batch.global / (plan.dp * batch.micro);
}

std::int64_t zero_shards(const Plan& plan) { return plan.dp * plan.cp; }

}  // namespace strata::strategies
