#include "backend/common/param_table.hpp"

#include <cmath>

#include "sim/error.hpp"

namespace strata::backend {

ParamTable::ParamTable(const cost::ModelSpec& spec) {
  using strategies::Part;
  const std::int64_t h = spec.hidden;
  const std::int64_t f = spec.ffn_hidden == 0 ? 4 * h : spec.ffn_hidden;
  const bool swiglu = spec.mlp == cost::MlpKind::Swiglu;
  const bool ln = spec.norm == cost::NormKind::LayerNorm;
  const std::int64_t up_parts = swiglu ? 2 : 1;
  const double sd = 0.02, sd_out = 0.02 / std::sqrt(2.0 * static_cast<double>(spec.layers));
  layer_.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, spec.layers)), {});
  block_role_.assign(layer_.size(), std::vector<int>(kParamRoles, -1));
  model_role_.assign(kParamRoles, -1);

  auto add = [&](ParamSpec p) {
    const int i = static_cast<int>(params_.size());
    if (p.part == Part::Layer) {
      layer_[static_cast<std::size_t>(p.layer)].push_back(i);
      block_role_[static_cast<std::size_t>(p.layer)][static_cast<std::size_t>(p.role)] = i;
    } else {
      (p.part == Part::Embedding ? embedding_ : head_).push_back(i);
      model_role_[static_cast<std::size_t>(p.role)] = i;
    }
    names_.push_back(p.name);
    params_.push_back(std::move(p));
  };
  auto normal = [](double s) { return std::pair{Init::Normal, s}; };
  auto model_param = [&](std::string name, Shape shape, Part part, ParamRole role, TpSplit split,
                         std::pair<Init, double> init, bool norm = false) {
    add({.name = std::move(name), .shape = shape, .part = part, .role = role, .split = split,
         .init = init.first, .sd = init.second, .norm = norm});
  };
  const std::pair ones{Init::Ones, 0.0}, zeros{Init::Zeros, 0.0};

  model_param("embedding", {spec.vocab, h}, Part::Embedding, ParamRole::WordEmbedding, TpSplit::Rows, normal(sd));
  if (spec.position_embedding == cost::PositionEmbedding::Learned)
    model_param("position_embedding", {spec.seq_len, h}, Part::Embedding, ParamRole::PositionEmbedding,
                TpSplit::Whole, normal(0.01));
  for (std::int64_t l = 0; l < spec.layers; ++l) {
    const std::string pre = "block" + std::to_string(l) + ".";
    auto block = [&](const std::string& name, Shape shape, ParamRole role, TpSplit split,
                     std::pair<Init, double> init, int parts = 1, bool norm = false) {
      add({.name = pre + name, .shape = shape, .part = Part::Layer, .layer = static_cast<int>(l), .role = role,
           .split = split, .parts = parts, .init = init.first, .sd = init.second, .norm = norm});
    };
    block("attn_norm.gain", {h}, ParamRole::AttnNormGain, TpSplit::Whole, ones, 1, true);
    if (ln) block("attn_norm.bias", {h}, ParamRole::AttnNormBias, TpSplit::Whole, zeros, 1, true);
    block("qkv.weight", {h, 3 * h}, ParamRole::QkvWeight, TpSplit::Columns, normal(sd), 3);
    if (spec.bias) block("qkv.bias", {3 * h}, ParamRole::QkvBias, TpSplit::Columns, zeros, 3);
    block("attn_proj.weight", {h, h}, ParamRole::ProjWeight, TpSplit::Rows, normal(sd_out));
    if (spec.bias) block("attn_proj.bias", {h}, ParamRole::ProjBias, TpSplit::Whole, zeros);
    block("mlp_norm.gain", {h}, ParamRole::MlpNormGain, TpSplit::Whole, ones, 1, true);
    if (ln) block("mlp_norm.bias", {h}, ParamRole::MlpNormBias, TpSplit::Whole, zeros, 1, true);
    const std::string up = swiglu ? "mlp_up_gate" : "mlp_up";
    block(up + ".weight", {h, up_parts * f}, ParamRole::UpWeight, TpSplit::Columns, normal(sd),
          static_cast<int>(up_parts));
    if (spec.bias)
      block(up + ".bias", {up_parts * f}, ParamRole::UpBias, TpSplit::Columns, zeros, static_cast<int>(up_parts));
    block("mlp_down.weight", {f, h}, ParamRole::DownWeight, TpSplit::Rows, normal(sd_out));
    if (spec.bias) block("mlp_down.bias", {h}, ParamRole::DownBias, TpSplit::Whole, zeros);
  }
  model_param("final_norm.gain", {h}, Part::Head, ParamRole::FinalNormGain, TpSplit::Whole, ones, true);
  if (ln) model_param("final_norm.bias", {h}, Part::Head, ParamRole::FinalNormBias, TpSplit::Whole, zeros, true);
  if (!spec.tied_embeddings)
    model_param("logits.weight", {spec.vocab, h}, Part::Head, ParamRole::LogitsWeight, TpSplit::Rows, normal(sd));
}

const std::vector<int>& ParamTable::of(strategies::Part part, int l) const {
  switch (part) {
    case strategies::Part::Embedding: return embedding_;
    case strategies::Part::Head: return head_;
    case strategies::Part::Layer: return layer(l);
    case strategies::Part::None: break;
  }
  throw Error("parameter table: no parameters for part none");
}

int ParamTable::find(ParamRole role, int layer) const {
  const auto r = static_cast<std::size_t>(role);
  if (layer < 0) return model_role_[r];
  if (layer >= layers()) return -1;
  return block_role_[static_cast<std::size_t>(layer)][r];
}

BlockIndex ParamTable::block(int l) const {
  BlockIndex b;
  b.norm1_g = find(ParamRole::AttnNormGain, l);
  b.norm1_b = find(ParamRole::AttnNormBias, l);
  b.w_qkv = find(ParamRole::QkvWeight, l);
  b.b_qkv = find(ParamRole::QkvBias, l);
  b.w_proj = find(ParamRole::ProjWeight, l);
  b.b_proj = find(ParamRole::ProjBias, l);
  b.norm2_g = find(ParamRole::MlpNormGain, l);
  b.norm2_b = find(ParamRole::MlpNormBias, l);
  b.w_up = find(ParamRole::UpWeight, l);
  b.b_up = find(ParamRole::UpBias, l);
  b.w_down = find(ParamRole::DownWeight, l);
  b.b_down = find(ParamRole::DownBias, l);
  return b;
}

int ParamTable::find(std::string_view name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  return -1;
}

Shape ParamTable::local_shape(int i, int tp) const {
  const ParamSpec& p = (*this)[i];
  if (tp <= 1 || p.split == TpSplit::Whole) return p.shape;
  if (p.split == TpSplit::Rows) return p.shape.rank() == 2 ? Shape{p.shape[0] / tp, p.shape[1]} : Shape{p.shape[0] / tp};
  return p.shape.rank() == 2 ? Shape{p.shape[0], p.shape[1] / tp} : Shape{p.shape[0] / tp};
}

std::string ParamTable::where(int i) const {
  const ParamSpec& p = (*this)[i];
  switch (p.part) {
    case strategies::Part::Layer: return "layer " + std::to_string(p.layer);
    case strategies::Part::Embedding: return "the embedding";
    case strategies::Part::Head:
    case strategies::Part::None: break;
  }
  return "the head";
}

}  // namespace strata::backend
