#pragma once
// The CUDA backend tests' small GPT: hidden 64, 4 heads, ffn 256,
// vocabulary 32, 16 tokens, fp32 with standard attention (what the backend
// computes), SGD with momentum (docs/cpu-backend.md says why not Adam for
// equivalence checks), on H200s: the cluster has `gpus` of them on one node.
#include <cstdint>
#include <vector>

#include "backend/common/corpus.hpp"
#include "backend/common/rng.hpp"

#include "costmodel/model_io.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cuda::test {

inline strategies::Scenario tiny_gpt(int layers, strategies::Plan plan, std::int64_t global, std::int64_t micro,
                                     int gpus = 1) {
  strategies::Scenario sc;
  sc.model.name = "tiny-cuda";
  sc.model.layers = layers;
  sc.model.hidden = 64;
  sc.model.heads = 4;
  sc.model.kv_heads = 4;
  sc.model.ffn_hidden = 256;
  sc.model.vocab = 32;
  sc.model.seq_len = 16;
  sc.cluster = cost::cluster_preset("1xh200");
  sc.cluster.node.gpus_per_node = gpus;
  sc.batch = {global, micro};
  plan.precision = cost::Precision::FP32;
  plan.implementation.attention = cost::AttentionKernel::Standard;
  plan.optimizer = strategies::Optimizer::Momentum;
  sc.plan = plan;
  return sc;
}

// A global batch of token and target ids from the CPU backend's Markov
// corpus (vocabulary of the model, corpus seed 7), sampled with `seed`.
struct Ids {
  std::vector<std::int32_t> tokens, targets;
};
inline Ids ids_of(const strategies::Scenario& sc, std::uint64_t seed) {
  const backend::MarkovCorpus corpus(sc.model.vocab, 7);
  backend::Rng rng(seed);
  Ids b;
  const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
  b.tokens.resize(n);
  b.targets.resize(n);
  corpus.sample(b.tokens, b.targets, sc.batch.global, sc.model.seq_len, rng);
  return b;
}

}  // namespace strata::backend::cuda::test
