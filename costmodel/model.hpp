#pragma once
// Model description: the architecture of a transformer (GPT, Llama, Mixtral
// style) as plain data, independent of any plan or hardware.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "sim/names.hpp"

namespace strata::cost {

enum class MlpKind { Gelu, Swiglu };
enum class NormKind { LayerNorm, RmsNorm };
enum class PositionEmbedding { Learned, Rope, Alibi, None };

struct MoeSpec {
  std::int64_t experts = 1;
  std::int64_t top_k = 1;
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
