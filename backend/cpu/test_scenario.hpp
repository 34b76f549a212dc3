#pragma once
// A small GPT scenario for the CPU backend's tests: cpu-local with one rank
// thread per device, fp32, standard attention (what the backend computes),
// no dropout.
#include <cstdint>

#include "costmodel/model_io.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cpu::test {

struct SmallGpt {
  std::int64_t layers = 2, hidden = 64, heads = 4, ffn = 256, vocab = 32, seq = 16;
};

inline strategies::Scenario small_gpt(const SmallGpt& m, strategies::Plan plan, std::int64_t global,
                                      std::int64_t micro) {
  strategies::Scenario sc;
  sc.model.name = "small-gpt";
  sc.model.layers = m.layers;
  sc.model.hidden = m.hidden;
  sc.model.heads = m.heads;
  sc.model.kv_heads = m.heads;
  sc.model.ffn_hidden = m.ffn;
  sc.model.vocab = m.vocab;
  sc.model.seq_len = m.seq;
  sc.model.dropout = false;
  sc.cluster = cost::cluster_preset("cpu-local");
  sc.batch = {global, micro};
  plan.precision = cost::Precision::FP32;
  plan.implementation.attention = cost::AttentionKernel::Standard;
  sc.plan = plan;
  sc.cluster.node.gpus_per_node = plan.gpus();
  return sc;
}

}  // namespace strata::backend::cpu::test
