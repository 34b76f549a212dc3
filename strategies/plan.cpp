#include "strategies/plan.hpp"

#include <algorithm>
#include <cmath>

namespace strata::strategies {

std::vector<std::int64_t> chunk_layers(const Plan& plan, std::int64_t layers) {
  if (!plan.stage_layers.empty()) return plan.stage_layers;
  const std::int64_t chunks = plan.pp * plan.virtual_stages;
  std::vector<std::int64_t> out(static_cast<std::size_t>(chunks), layers / chunks);
  // The remainder goes to the middle chunks: the first and last stages also
  // hold the embedding and the head.
  const std::int64_t extra = layers % chunks;
  const std::int64_t start = (chunks - extra) / 2;
  for (std::int64_t i = 0; i < extra; ++i) out[static_cast<std::size_t>(start + i)] += 1;
  return out;
}

std::int64_t sparse_k(double ratio, std::int64_t n) {
  if (n <= 0) return 0;
  const auto k = static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<std::int64_t>(k, 1, n);
}

std::int64_t microbatches(const Plan& plan, const Batch& batch) {
  return batch.global / (plan.dp * batch.micro);
}

std::int64_t zero_shards(const Plan& plan) { return plan.dp * plan.cp; }

}  // namespace strata::strategies
