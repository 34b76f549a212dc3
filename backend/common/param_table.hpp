#pragma once
// The parameters of the GPT both backends train, as data: one row per
// tensor with its name, whole shape, the part of the model it belongs to
// (embedding, a layer, the head) and the layer, its role in the block, how
// tensor parallelism splits it and how it is initialised. Both models
// (backend/cpu/gpt.cpp, backend/cuda/gpt.cpp) create their tensors from it,
// in its order, and the executors and the bucket plan (bucket_plan.hpp)
// find a layer's parameters, the embedding's and the head's here rather
// than by parsing names.
//
// Order (the models' params() order, the order a flat bucket packs them):
// embedding, position_embedding (learned positions), then per block
// attn_norm.gain, attn_norm.bias (layer norm), qkv.weight, qkv.bias (bias),
// attn_proj.weight, attn_proj.bias, mlp_norm.gain, mlp_norm.bias,
// mlp_up.weight or mlp_up_gate.weight (SwiGLU), its bias, mlp_down.weight,
// mlp_down.bias, then final_norm.gain, final_norm.bias and logits.weight
// (untied logits). Block parameters are named "block<L>.<tensor>".
//
// Initialisation (GPT-2): weights N(0, 0.02²), each block's attn_proj and
// mlp_down weights N(0, (0.02/√(2L))²), positions N(0, 0.01²), biases 0,
// norm gains 1. The CPU model draws the normal ones from one seeded Rng in
// table order; the CUDA model from a counter-based generator per tensor.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/shape.hpp"
#include "costmodel/model.hpp"
#include "lowering/lower.hpp"

namespace strata::backend {

// A block's tensors by what they are: positions in the table (and in a
// model's parameter list); −1 when absent (no bias, RMS norm).
struct BlockIndex {
  int norm1_g = -1, norm1_b = -1, w_qkv = -1, b_qkv = -1, w_proj = -1, b_proj = -1;
  int norm2_g = -1, norm2_b = -1, w_up = -1, b_up = -1, w_down = -1, b_down = -1;
};

// A tensor's role in the model.
enum class ParamRole : std::uint8_t {
  WordEmbedding,
  PositionEmbedding,
  AttnNormGain,
  AttnNormBias,
  QkvWeight,
  QkvBias,
  ProjWeight,
  ProjBias,
  MlpNormGain,
  MlpNormBias,
  UpWeight,  // mlp_up (GeLU) or mlp_up_gate (SwiGLU: gate | up)
  UpBias,
  DownWeight,
  DownBias,
  FinalNormGain,
  FinalNormBias,
  LogitsWeight,  // untied logits
};
inline constexpr int kParamRoles = 17;

// How tensor parallelism splits a tensor (Megatron-LM, Shoeybi et al.
// 2019): whole on every rank; by rows (row-parallel weights, the
// vocabulary-split word embedding and logits); or by columns, each of its
// `parts` equal column runs split alike (column-parallel: Q | K | V,
// SwiGLU's gate | up).
enum class TpSplit : std::uint8_t { Whole, Rows, Columns };

enum class Init : std::uint8_t { Zeros, Ones, Normal };

struct ParamSpec {
  std::string name;
  Shape shape;  // the whole tensor
  strategies::Part part = strategies::Part::None;  // Embedding, Layer or Head
  int layer = -1;                                  // Part::Layer: the block
  ParamRole role = ParamRole::WordEmbedding;
  TpSplit split = TpSplit::Whole;
  int parts = 1;     // TpSplit::Columns: the column runs
  Init init = Init::Zeros;
  double sd = 0;     // Init::Normal
  // A norm's gain or bias: under sequence parallelism each tensor-parallel
  // rank's gradient holds only its rows' part (summed over the group before
  // the optimizer step).
  bool norm = false;
};

class ParamTable {
 public:
  ParamTable() = default;
  // The GPT of `spec` (kv_heads 0 means heads, ffn_hidden 0 means
  // 4·hidden). Does not check what a model implements (each model does).
  explicit ParamTable(const cost::ModelSpec& spec);

  int size() const { return static_cast<int>(params_.size()); }
  const ParamSpec& operator[](int i) const { return params_[static_cast<std::size_t>(i)]; }
  const std::vector<ParamSpec>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  int layers() const { return static_cast<int>(layer_.size()); }

  // Indices, in table order: layer l's, the embedding's (word and position
  // embeddings), the head's (final norm and untied logits).
  const std::vector<int>& layer(int l) const { return layer_[static_cast<std::size_t>(l)]; }
  const std::vector<int>& embedding() const { return embedding_; }
  const std::vector<int>& head() const { return head_; }
  // The parameters of a part (Part::Layer: of layer `l`).
  const std::vector<int>& of(strategies::Part part, int l = -1) const;

  // A block's tensor of `role`, or a model-level one (layer −1); −1 when the
  // model has none (no bias, RMS norm, tied logits, no positions).
  int find(ParamRole role, int layer = -1) const;
  int find(std::string_view name) const;  // −1 when absent
  int word_embedding() const { return find(ParamRole::WordEmbedding); }
  // Block `layer`'s tensors, each found by its role.
  BlockIndex block(int layer) const;

  // Parameter i's shape on a rank of a tensor-parallel group of `tp`.
  Shape local_shape(int i, int tp) const;
  // "layer 3", "the embedding", "the head": where parameter i sits.
  std::string where(int i) const;

 private:
  std::vector<ParamSpec> params_;
  std::vector<std::string> names_;
  std::vector<std::vector<int>> layer_;
  std::vector<int> embedding_, head_;
  std::vector<std::vector<int>> block_role_;  // by layer, by role
  std::vector<int> model_role_;               // by role (model-level tensors)
};

}  // namespace strata::backend
