#include "backend/cpu/gpt.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/rng.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {

namespace {
constexpr float kNormEps = 1e-5f;

cost::ModelSpec checked_spec(cost::ModelSpec m) {
  const std::string who = "GptModel '" + m.name + "': ";
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.ffn_hidden == 0) m.ffn_hidden = 4 * m.hidden;
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.vocab < 1 || m.seq_len < 1 ||
      m.ffn_hidden < 1)
    throw Error(who + "layers, hidden, heads, ffn_hidden, vocab and seq_len must be >= 1");
  if (m.hidden % m.heads != 0) throw Error(who + "heads must divide hidden");
  if (m.kv_heads != m.heads)
    throw Error(who + "grouped-query attention (kv_heads != heads) is not implemented");
  if (m.moe) throw Error(who + "mixture of experts is not implemented");
  if (m.dropout) throw Error(who + "dropout is not implemented (train with p = 0)");
  if (m.position_embedding != cost::PositionEmbedding::Learned &&
      m.position_embedding != cost::PositionEmbedding::None)
    throw Error(who + "only learned positions (or none) are implemented");
  return m;
}
}  // namespace

// What one block keeps for backward, named by the op that saves it.
struct GptModel::BlockSaved {
  Tensor x;      // attn_norm: its input (the block's input)
  Tensor ln1;    // qkv: its input
  Tensor qkv;    // attn_scores: Q, K; attn_values: V
  Tensor probs;  // softmax: its output
  Tensor attn;   // attn_proj: its input
  Tensor x1;     // mlp_norm: its input
  Tensor ln2;    // mlp_up: its input
  Tensor up;     // gelu / swiglu: its input
  Tensor act;    // mlp_down: its input

  Bytes bytes() const {
    return x.bytes() + ln1.bytes() + qkv.bytes() + probs.bytes() + attn.bytes() + x1.bytes() +
           ln2.bytes() + up.bytes() + act.bytes();
  }
};

// Gradients and scratch alive during backward.
struct GptModel::StepState {
  Tensor dres;     // gradient of the residual stream, updated in place
  Tensor d_norm;   // gradient of a norm's output
  Tensor d_attn;   // gradient of the attention output
  Tensor d_qkv;    // gradient of the qkv output
  Tensor d_act;    // gradient of the activation output (GeLU: also its input)
  Tensor d_up;     // gradient of the SwiGLU input (gate | up)
  Tensor scratch;  // attention backward: seq × seq
};

GptModel::GptModel(const cost::ModelSpec& spec, Allocator& alloc, std::uint64_t seed)
    : spec_(checked_spec(spec)), alloc_(&alloc) {
  const auto& m = spec_;
  const std::int64_t h = m.hidden, f = m.ffn_hidden;
  const bool swiglu = m.mlp == cost::MlpKind::Swiglu;
  const bool ln = m.norm == cost::NormKind::LayerNorm;
  up_width_ = swiglu ? 2 * f : f;

  // Shapes first (so params_ never reallocates under a pointer), then values.
  tok_emb_ = add_param("embedding", {m.vocab, h});
  if (m.position_embedding == cost::PositionEmbedding::Learned)
    pos_emb_ = add_param("position_embedding", {m.seq_len, h});
  blocks_.resize(static_cast<std::size_t>(m.layers));
  for (std::int64_t l = 0; l < m.layers; ++l) {
    auto& b = blocks_[static_cast<std::size_t>(l)];
    const std::string pre = "block" + std::to_string(l) + ".";
    b.norm1_g = add_param(pre + "attn_norm.gain", {h});
    if (ln) b.norm1_b = add_param(pre + "attn_norm.bias", {h});
    b.w_qkv = add_param(pre + "qkv.weight", {h, 3 * h});
    if (m.bias) b.b_qkv = add_param(pre + "qkv.bias", {3 * h});
    b.w_proj = add_param(pre + "attn_proj.weight", {h, h});
    if (m.bias) b.b_proj = add_param(pre + "attn_proj.bias", {h});
    b.norm2_g = add_param(pre + "mlp_norm.gain", {h});
    if (ln) b.norm2_b = add_param(pre + "mlp_norm.bias", {h});
    b.w_up = add_param(pre + (swiglu ? "mlp_up_gate.weight" : "mlp_up.weight"), {h, up_width_});
    if (m.bias) b.b_up = add_param(pre + (swiglu ? "mlp_up_gate.bias" : "mlp_up.bias"), {up_width_});
    b.w_down = add_param(pre + "mlp_down.weight", {f, h});
    if (m.bias) b.b_down = add_param(pre + "mlp_down.bias", {h});
  }
  normf_g_ = add_param("final_norm.gain", {h});
  if (ln) normf_b_ = add_param("final_norm.bias", {h});
  if (!m.tied_embeddings) w_logits_ = add_param("logits.weight", {m.vocab, h});

  Rng rng(seed);
  auto normal = [&](int i, double sd) {
    for (float& v : params_[static_cast<std::size_t>(i)].span())
      v = static_cast<float>(sd * rng.normal());
  };
  auto ones = [&](int i) {
    if (i >= 0)
      for (float& v : params_[static_cast<std::size_t>(i)].span()) v = 1.0f;
  };
  const double sd = 0.02, sd_out = 0.02 / std::sqrt(2.0 * static_cast<double>(m.layers));
  normal(tok_emb_, sd);
  if (pos_emb_ >= 0) normal(pos_emb_, 0.01);
  for (const auto& b : blocks_) {
    ones(b.norm1_g);
    normal(b.w_qkv, sd);
    normal(b.w_proj, sd_out);
    ones(b.norm2_g);
    normal(b.w_up, sd);
    normal(b.w_down, sd_out);
  }
  ones(normf_g_);
  if (w_logits_ >= 0) normal(w_logits_, sd);
}

int GptModel::add_param(const std::string& name, Shape shape) {
  params_.emplace_back(*alloc_, shape, MemTag::Params);
  grads_.emplace_back(*alloc_, shape, MemTag::Grads);
  names_.push_back(name);
  return static_cast<int>(params_.size()) - 1;
}

std::int64_t GptModel::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& t : params_) n += t.numel();
  return n;
}

void GptModel::zero_grads() {
  for (auto& t : grads_) t.zero();
}

void GptModel::norm_forward(int gi, int bi, const float* x, float* y, std::int64_t rows) {
  if (spec_.norm == cost::NormKind::LayerNorm)
    layernorm_forward(x, p(gi), p(bi), y, rows, spec_.hidden, kNormEps);
  else
    rmsnorm_forward(x, p(gi), y, rows, spec_.hidden, kNormEps);
}

void GptModel::norm_backward(int gi, int bi, const float* x, const float* dy, float* dx,
                             std::int64_t rows) {
  if (spec_.norm == cost::NormKind::LayerNorm)
    layernorm_backward(x, p(gi), dy, dx, g(gi), g(bi), rows, spec_.hidden, kNormEps);
  else
    rmsnorm_backward(x, p(gi), dy, dx, g(gi), rows, spec_.hidden, kNormEps);
}

void GptModel::block_forward(int layer, BlockSaved& s, Tensor& out, std::int64_t batch) {
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden, f = spec_.ffn_hidden;
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;

  s.ln1 = Tensor(a, {N, h}, act);
  norm_forward(b.norm1_g, b.norm1_b, s.x.data(), s.ln1.data(), N);
  s.qkv = Tensor(a, {N, 3 * h}, act);
  linear_forward(s.ln1.data(), p(b.w_qkv), p(b.b_qkv), s.qkv.data(), N, h, 3 * h,
                 WeightLayout::InOut, false);
  const AttentionDims dims{batch, S, spec_.heads, spec_.head_dim()};
  s.probs = Tensor(a, {batch, spec_.heads, S, S}, act);
  s.attn = Tensor(a, {N, h}, act);
  attention_forward(s.qkv.data(), s.probs.data(), s.attn.data(), dims);
  // x1 = x + attn·W + b: the residual add folded into the product.
  s.x1 = s.x.clone(a, act);
  linear_forward(s.attn.data(), p(b.w_proj), p(b.b_proj), s.x1.data(), N, h, h,
                 WeightLayout::InOut, true);
  s.ln2 = Tensor(a, {N, h}, act);
  norm_forward(b.norm2_g, b.norm2_b, s.x1.data(), s.ln2.data(), N);
  s.up = Tensor(a, {N, up_width_}, act);
  linear_forward(s.ln2.data(), p(b.w_up), p(b.b_up), s.up.data(), N, h, up_width_,
                 WeightLayout::InOut, false);
  s.act = Tensor(a, {N, f}, act);
  if (spec_.mlp == cost::MlpKind::Gelu)
    gelu_forward(s.up.data(), s.act.data(), N * f);
  else
    swiglu_forward(s.up.data(), s.act.data(), N, f);
  out = s.x1.clone(a, act);
  linear_forward(s.act.data(), p(b.w_down), p(b.b_down), out.data(), N, f, h,
                 WeightLayout::InOut, true);
}

void GptModel::block_backward(int layer, const BlockSaved& s, StepState& st,
                              std::int64_t batch) {
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden, f = spec_.ffn_hidden;
  // MLP branch: st.dres holds the gradient of the block's output.
  linear_backward(s.act.data(), p(b.w_down), st.dres.data(), st.d_act.data(), g(b.w_down),
                  g(b.b_down), N, f, h, WeightLayout::InOut, false);
  float* d_up = st.d_act.data();
  if (spec_.mlp == cost::MlpKind::Gelu) {
    gelu_backward(s.up.data(), st.d_act.data(), st.d_act.data(), N * f);
  } else {
    swiglu_backward(s.up.data(), st.d_act.data(), st.d_up.data(), N, f);
    d_up = st.d_up.data();
  }
  linear_backward(s.ln2.data(), p(b.w_up), d_up, st.d_norm.data(), g(b.w_up), g(b.b_up), N, h,
                  up_width_, WeightLayout::InOut, false);
  norm_backward(b.norm2_g, b.norm2_b, s.x1.data(), st.d_norm.data(), st.dres.data(), N);
  // Attention branch: st.dres now holds the gradient of x1.
  linear_backward(s.attn.data(), p(b.w_proj), st.dres.data(), st.d_attn.data(), g(b.w_proj),
                  g(b.b_proj), N, h, h, WeightLayout::InOut, false);
  const AttentionDims dims{batch, S, spec_.heads, spec_.head_dim()};
  attention_backward(s.qkv.data(), s.probs.data(), st.d_attn.data(), st.d_qkv.data(),
                     st.scratch.data(), dims);
  linear_backward(s.ln1.data(), p(b.w_qkv), st.d_qkv.data(), st.d_norm.data(), g(b.w_qkv),
                  g(b.b_qkv), N, h, 3 * h, WeightLayout::InOut, false);
  norm_backward(b.norm1_g, b.norm1_b, s.x.data(), st.d_norm.data(), st.dres.data(), N);
}

double GptModel::run(std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> targets, std::int64_t batch, bool backward,
                     float loss_scale) {
  const auto& m = spec_;
  const std::int64_t S = m.seq_len, N = batch * S, h = m.hidden, V = m.vocab;
  if (batch < 1) throw Error("GptModel: batch must be >= 1");
  if (static_cast<std::int64_t>(tokens.size()) != N ||
      static_cast<std::int64_t>(targets.size()) != N)
    throw Error("GptModel: tokens and targets must hold batch·seq_len = " + std::to_string(N) +
                " ids (got " + std::to_string(tokens.size()) + " and " +
                std::to_string(targets.size()) + ")");
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;

  // Embedding: keeps the token ids.
  IndexTensor ids(a, {N}, act);
  std::memcpy(ids.data(), tokens.data(), static_cast<std::size_t>(N) * sizeof(std::int32_t));
  std::vector<BlockSaved> saved(static_cast<std::size_t>(m.layers));
  saved[0].x = Tensor(a, {N, h}, act);
  embedding_forward(ids.data(), p(tok_emb_), p(pos_emb_), saved[0].x.data(), batch, S, h, V);

  Tensor xf;  // the last block's output: final_norm's input
  for (int l = 0; l < m.layers; ++l) {
    auto& next = (l + 1 < m.layers) ? saved[static_cast<std::size_t>(l) + 1].x : xf;
    block_forward(l, saved[static_cast<std::size_t>(l)], next, batch);
  }

  // Head: final norm, logits, loss (the fp32 logits become its gradient).
  Tensor lnf(a, {N, h}, act);
  norm_forward(normf_g_, normf_b_, xf.data(), lnf.data(), N);
  Tensor logits(a, {N, V}, act);
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  linear_forward(lnf.data(), p(w_out), nullptr, logits.data(), N, h, V, WeightLayout::OutIn,
                 false);
  const double mean_loss =
      cross_entropy_forward(logits.data(), targets.data(), N, V) / static_cast<double>(N);
  saved_ = {ids.bytes(), saved[0].bytes(), xf.bytes() + lnf.bytes() + logits.bytes()};
  if (!backward) return mean_loss;
  cross_entropy_backward(logits.data(), targets.data(), N, V,
                         loss_scale / static_cast<float>(N));

  StepState st;
  st.dres = Tensor(a, {N, h}, act);
  st.d_norm = Tensor(a, {N, h}, act);
  linear_backward(lnf.data(), p(w_out), logits.data(), st.d_norm.data(), g(w_out), nullptr, N,
                  h, V, WeightLayout::OutIn, false);
  logits.release();
  lnf.release();
  norm_backward(normf_g_, normf_b_, xf.data(), st.d_norm.data(), st.dres.data(), N);
  xf.release();

  st.d_attn = Tensor(a, {N, h}, act);
  st.d_qkv = Tensor(a, {N, 3 * h}, act);
  st.d_act = Tensor(a, {N, m.ffn_hidden}, act);
  if (m.mlp == cost::MlpKind::Swiglu) st.d_up = Tensor(a, {N, up_width_}, act);
  st.scratch = Tensor(a, {S, S}, MemTag::Workspace);
  for (int l = static_cast<int>(m.layers) - 1; l >= 0; --l) {
    block_backward(l, saved[static_cast<std::size_t>(l)], st, batch);
    saved[static_cast<std::size_t>(l)] = BlockSaved{};  // its saved tensors die here
  }
  embedding_backward(ids.data(), st.dres.data(), g(tok_emb_), g(pos_emb_), batch, S, h);
  return mean_loss;
}

double GptModel::forward_backward(std::span<const std::int32_t> tokens,
                                  std::span<const std::int32_t> targets, std::int64_t batch,
                                  float loss_scale) {
  return run(tokens, targets, batch, true, loss_scale);
}

double GptModel::loss(std::span<const std::int32_t> tokens,
                      std::span<const std::int32_t> targets, std::int64_t batch) {
  return run(tokens, targets, batch, false, 1.0f);
}

}  // namespace strata::backend::cpu
