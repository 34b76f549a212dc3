#pragma once
// Conventions both backends' kernels share (backend/cpu/kernels.hpp and its
// CUDA counterparts take the same arguments): how a linear layer's weight
// is stored and the shape of a standard causal attention.
#include <cstdint>

namespace strata::backend {

// The weight is stored [in × out] (the op chain's rows × cols), or [out × in]
// for the logits tied to the [vocab × hidden] embedding table.
enum class WeightLayout { InOut, OutIn };

// qkv: [batch·seq × 3·heads·head_dim], each row Q | K | V, heads side by
// side within each; probs: [batch × heads × seq × seq].
struct AttentionDims {
  std::int64_t batch = 1, seq = 1, heads = 1, head_dim = 1;
  std::int64_t hidden() const { return heads * head_dim; }
};

}  // namespace strata::backend
