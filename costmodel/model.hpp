#pragma once
// Model description: the architecture of a transformer (GPT, Llama, Mixtral
// style) as plain data, independent of any plan or hardware.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "sim/units.hpp"

namespace strata::cost {

enum class MlpKind { Gelu, Swiglu };
enum class NormKind { LayerNorm, RmsNorm };
enum class PositionEmbedding { Learned, Rope, Alibi, None };

struct MoeSpec {
  std::int64_t experts = 1;
  std::int64_t top_k = 1;
};

// One stage of a layer-chain model (docs/input-format.md, `chain`): a layer
// or a block (a residual unit) whose input is the previous stage's output.
// Every count is per input sample; a microbatch of b samples scales them by b.
struct ChainLayer {
  std::string name;
  Flops fwd_flops = 0;         // forward FLOPs
  Flops bwd_flops = 0;         // backward FLOPs (input and weight gradients)
  std::int64_t params = 0;     // parameters
  Bytes output_bytes = 0;      // the stage's output: the next stage's input
  // Activations the backward needs beyond the stage's input and output
  // (inside a residual unit: the normalised and activated tensors).
  Bytes saved_bytes = 0;
  // Transient bytes while the stage's forward or backward runs, beyond its
  // input, output and saved tensors (gradients of its inner tensors).
  Bytes workspace_bytes = 0;
};

// A model given as a chain of layers with their costs (CNNs, ResNets,
// U-Nets) instead of a transformer's dimensions.
struct LayerChain {
  Bytes input_bytes = 0;          // one sample of the chain's input
  std::vector<ChainLayer> layers;  // in forward order, repeats expanded

  std::int64_t params() const;
  Flops fwd_flops() const;
  Flops bwd_flops() const;
};

struct ModelSpec {
  std::string name;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;    // = heads unless grouped-query attention
  std::int64_t ffn_hidden = 0;  // = 4·hidden by default
  std::int64_t vocab = 0;
  std::int64_t seq_len = 0;
  MlpKind mlp = MlpKind::Gelu;
  NormKind norm = NormKind::LayerNorm;
  bool bias = true;
  PositionEmbedding position_embedding = PositionEmbedding::Learned;
  bool tied_embeddings = true;
  // Dropout after attention scores, attention output, MLP output and the
  // embedding (Megatron GPT); its masks are saved for backward.
  bool dropout = false;
  std::optional<MoeSpec> moe;
  // A layer-chain model: `layers` is its stage count and the transformer
  // dimensions are 0.
  std::optional<LayerChain> chain;
  std::string source;  // where the numbers come from (presets)

  std::int64_t head_dim() const { return hidden / heads; }
  std::int64_t kv_hidden() const { return kv_heads * head_dim(); }
};

}  // namespace strata::cost

namespace strata {

template <>
struct EnumNames<cost::MlpKind> {
  static constexpr std::array<std::pair<cost::MlpKind, std::string_view>, 2> table{
      {{cost::MlpKind::Gelu, "gelu"}, {cost::MlpKind::Swiglu, "swiglu"}}};
};
template <>
struct EnumNames<cost::NormKind> {
  static constexpr std::array<std::pair<cost::NormKind, std::string_view>, 2> table{
      {{cost::NormKind::LayerNorm, "layernorm"}, {cost::NormKind::RmsNorm, "rmsnorm"}}};
};
template <>
struct EnumNames<cost::PositionEmbedding> {
  static constexpr std::array<std::pair<cost::PositionEmbedding, std::string_view>, 4> table{
      {{cost::PositionEmbedding::Learned, "learned"},
       {cost::PositionEmbedding::Rope, "rope"},
       {cost::PositionEmbedding::Alibi, "alibi"},
       {cost::PositionEmbedding::None, "none"}}};
};

}  // namespace strata
