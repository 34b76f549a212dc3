#include "backend/cpu/gpt.hpp"

#include <algorithm>
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
  if (m.position_embedding != cost::PositionEmbedding::Learned &&
      m.position_embedding != cost::PositionEmbedding::None)
    throw Error(who + "only learned positions (or none) are implemented");
  return m;
}
}  // namespace

Bytes BlockSaved::bytes() const {
  return x.bytes() + ln1.bytes() + qkv.bytes() + probs.bytes() + attn_mask.bytes() +
         dropped.bytes() + attn.bytes() + proj_mask.bytes() + x1.bytes() + ln2.bytes() +
         up.bytes() + act.bytes() + mlp_mask.bytes();
}

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

void GptModel::check_ids(std::span<const std::int32_t> ids, std::int64_t batch,
                         const char* what) const {
  if (batch < 1) throw Error("GptModel: batch must be >= 1");
  const std::int64_t n = batch * spec_.seq_len;
  if (static_cast<std::int64_t>(ids.size()) != n)
    throw Error(std::string("GptModel: ") + what + " must hold batch·seq_len = " +
                std::to_string(n) + " ids (got " + std::to_string(ids.size()) + ")");
}

namespace {
// Where a dropout mask sits, for its seed.
enum class DropSite : std::uint64_t { Embedding = 1, Attention = 2, Projection = 3, Mlp = 4 };

// The seed of one mask: the step's seed mixed with the layer and the site.
std::uint64_t mask_seed(std::uint64_t seed, int layer, DropSite site) {
  std::uint64_t z = seed ^ ((static_cast<std::uint64_t>(layer + 1) << 8) |
                            static_cast<std::uint64_t>(site));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

MaskTensor make_mask(Allocator& a, Shape shape, const Dropout& d, int layer, DropSite site) {
  MaskTensor m(a, shape, MemTag::Activations);
  dropout_mask(m.data(), m.numel(), d.p, mask_seed(d.seed, layer, site));
  return m;
}
}  // namespace

void GptModel::check_dropout(const Dropout& d) const {
  if (!(d.p >= 0.0f && d.p < 1.0f))
    throw Error("GptModel: dropout probability " + std::to_string(d.p) + " is outside [0, 1)");
  if (!spec_.dropout && d.p != 0.0f)
    throw Error("GptModel '" + spec_.name + "': dropout p > 0 for a model without dropout");
}

Tensor GptModel::embedding_forward(std::span<const std::int32_t> tokens, std::int64_t batch,
                                   EmbeddingSaved& saved, Dropout dropout) {
  check_ids(tokens, batch, "tokens");
  check_dropout(dropout);
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden;
  saved.tokens = IndexTensor(*alloc_, {N}, MemTag::Activations);
  std::memcpy(saved.tokens.data(), tokens.data(), static_cast<std::size_t>(N) * sizeof(std::int32_t));
  Tensor out(*alloc_, {N, h}, MemTag::Activations);
  cpu::embedding_forward(saved.tokens.data(), p(tok_emb_), p(pos_emb_), out.data(), batch, S, h,
                         spec_.vocab);
  saved.dropout = dropout;
  if (spec_.dropout) {
    saved.mask = make_mask(*alloc_, {N, h}, dropout, -1, DropSite::Embedding);
    dropout_apply(out.data(), saved.mask.data(), out.data(), N * h, dropout.p);
  }
  return out;
}

void GptModel::attention_core(const BlockSaved& s, float* probs, float* out) const {
  const AttentionDims dims{batch_of(s.x), spec_.seq_len, spec_.heads, spec_.head_dim()};
  if (!spec_.dropout) return attention_forward(s.qkv.data(), probs, out, dims);
  const AttentionDropout ad{s.attn_mask.data(), const_cast<float*>(s.dropped.data()),
                            s.dropout.p};
  attention_forward(s.qkv.data(), probs, out, dims, &ad);
}

// Runs the block from s.x, filling every saved tensor that is empty (all of
// them after a plain forward; the dropped ones when recomputing). `out`:
// where the block's output goes (null when recomputing).
void GptModel::block_forward_into(int layer, BlockSaved& s, Tensor* out) {
  if (layer < 0 || layer >= spec_.layers)
    throw Error("GptModel: layer " + std::to_string(layer) + " out of range");
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t N = s.x.dim(0), batch = batch_of(s.x), S = spec_.seq_len;
  const std::int64_t h = spec_.hidden, f = spec_.ffn_hidden;
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;

  if (s.ln1.empty()) {
    s.ln1 = Tensor(a, {N, h}, act);
    norm_forward(b.norm1_g, b.norm1_b, s.x.data(), s.ln1.data(), N);
  }
  if (s.qkv.empty()) {
    s.qkv = Tensor(a, {N, 3 * h}, act);
    linear_forward(s.ln1.data(), p(b.w_qkv), p(b.b_qkv), s.qkv.data(), N, h, 3 * h,
                   WeightLayout::InOut, false);
  }
  const Dropout& dr = s.dropout;
  if (s.probs.empty()) {
    // Selective recompute refills only the core (attn was kept).
    const bool need_attn = s.attn.empty();
    s.probs = Tensor(a, {batch, spec_.heads, S, S}, act);
    if (spec_.dropout) {
      s.attn_mask = make_mask(a, {batch, spec_.heads, S, S}, dr, layer, DropSite::Attention);
      s.dropped = Tensor(a, {batch, spec_.heads, S, S}, act);
    }
    if (need_attn) s.attn = Tensor(a, {N, h}, act);
    attention_core(s, s.probs.data(), need_attn ? s.attn.data() : nullptr);
  }
  if (spec_.dropout && s.proj_mask.empty())
    s.proj_mask = make_mask(a, {N, h}, dr, layer, DropSite::Projection);
  if (spec_.dropout && s.mlp_mask.empty())
    s.mlp_mask = make_mask(a, {N, h}, dr, layer, DropSite::Mlp);
  if (s.x1.empty()) {
    if (spec_.dropout) {
      // x1 = x + dropout(attn·W + b).
      s.x1 = Tensor(a, {N, h}, act);
      linear_forward(s.attn.data(), p(b.w_proj), p(b.b_proj), s.x1.data(), N, h, h,
                     WeightLayout::InOut, false);
      dropout_apply(s.x1.data(), s.proj_mask.data(), s.x1.data(), N * h, dr.p);
      residual_forward(s.x1.data(), s.x.data(), s.x1.data(), N * h);
    } else {
      // x1 = x + attn·W + b: the residual add folded into the product.
      s.x1 = s.x.clone(a, act);
      linear_forward(s.attn.data(), p(b.w_proj), p(b.b_proj), s.x1.data(), N, h, h,
                     WeightLayout::InOut, true);
    }
  }
  if (s.ln2.empty()) {
    s.ln2 = Tensor(a, {N, h}, act);
    norm_forward(b.norm2_g, b.norm2_b, s.x1.data(), s.ln2.data(), N);
  }
  if (s.up.empty()) {
    s.up = Tensor(a, {N, up_width_}, act);
    linear_forward(s.ln2.data(), p(b.w_up), p(b.b_up), s.up.data(), N, h, up_width_,
                   WeightLayout::InOut, false);
  }
  if (s.act.empty()) {
    s.act = Tensor(a, {N, f}, act);
    if (spec_.mlp == cost::MlpKind::Gelu)
      gelu_forward(s.up.data(), s.act.data(), N * f);
    else
      swiglu_forward(s.up.data(), s.act.data(), N, f);
  }
  if (out != nullptr) {
    if (spec_.dropout) {
      *out = Tensor(a, {N, h}, act);
      linear_forward(s.act.data(), p(b.w_down), p(b.b_down), out->data(), N, f, h,
                     WeightLayout::InOut, false);
      dropout_apply(out->data(), s.mlp_mask.data(), out->data(), N * h, dr.p);
      residual_forward(out->data(), s.x1.data(), out->data(), N * h);
    } else {
      *out = s.x1.clone(a, act);
      linear_forward(s.act.data(), p(b.w_down), p(b.b_down), out->data(), N, f, h,
                     WeightLayout::InOut, true);
    }
  }
}

void GptModel::check_activation(const Tensor& t, const char* who) const {
  if (t.empty() || t.shape().rank() != 2 || t.dim(1) != spec_.hidden ||
      t.dim(0) % spec_.seq_len != 0)
    throw Error(std::string("GptModel::") + who + ": input must be [batch·seq_len × hidden], got " +
                t.shape().str());
}

Tensor GptModel::block_forward(int layer, Tensor input, BlockSaved& saved, Dropout dropout) {
  check_dropout(dropout);
  check_activation(input, "block_forward");
  saved = BlockSaved{};
  saved.x = std::move(input);
  saved.dropout = dropout;
  Tensor out;
  block_forward_into(layer, saved, &out);
  return out;
}

void GptModel::drop_for_recompute(BlockSaved& s, cost::Recompute policy) {
  switch (policy) {
    case cost::Recompute::None:
      return;
    case cost::Recompute::Selective:
      s.probs.release();
      s.attn_mask.release();
      s.dropped.release();
      return;
    case cost::Recompute::Full: {
      Tensor x = std::move(s.x);
      const Dropout d = s.dropout;
      s = BlockSaved{};
      s.x = std::move(x);
      s.dropout = d;
      return;
    }
    default:
      throw Error("recompute policy '" + std::string(enum_name(policy)) +
                  "' is a schedule over layers: give each layer None, Selective or Full");
  }
}

void GptModel::recompute(int layer, BlockSaved& saved) {
  if (saved.x.empty()) throw Error("GptModel::recompute: the block's input was not kept");
  block_forward_into(layer, saved, nullptr);
}

double GptModel::head_forward(Tensor input, std::span<const std::int32_t> targets,
                              float loss_scale, HeadSaved& s) {
  check_activation(input, "head_forward");
  const std::int64_t N = input.dim(0), batch = batch_of(input), h = spec_.hidden,
                     V = spec_.vocab;
  check_ids(targets, batch, "targets");
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;
  s = HeadSaved{};
  s.x = std::move(input);
  s.ln = Tensor(a, {N, h}, act);
  norm_forward(normf_g_, normf_b_, s.x.data(), s.ln.data(), N);
  s.logits = Tensor(a, {N, V}, act);
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  linear_forward(s.ln.data(), p(w_out), nullptr, s.logits.data(), N, h, V, WeightLayout::OutIn,
                 false);
  const double mean =
      cross_entropy_forward(s.logits.data(), targets.data(), N, V) / static_cast<double>(N);
  cross_entropy_backward(s.logits.data(), targets.data(), N, V,
                         loss_scale / static_cast<float>(N));
  return mean;
}

BackwardBuffers GptModel::backward_buffers(std::int64_t batch) {
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden;
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;
  BackwardBuffers b;
  b.dres = Tensor(a, {N, h}, act);
  b.d_norm = Tensor(a, {N, h}, act);
  b.d_attn = Tensor(a, {N, h}, act);
  b.d_qkv = Tensor(a, {N, 3 * h}, act);
  b.d_act = Tensor(a, {N, spec_.ffn_hidden}, act);
  if (spec_.mlp == cost::MlpKind::Swiglu) b.d_up = Tensor(a, {N, up_width_}, act);
  b.scratch = Tensor(a, {S, S}, MemTag::Workspace);
  return b;
}

void GptModel::head_backward(const HeadSaved& s, BackwardBuffers& st) {
  const std::int64_t N = s.x.dim(0), h = spec_.hidden, V = spec_.vocab;
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  linear_backward(s.ln.data(), p(w_out), s.logits.data(), st.d_norm.data(), g(w_out), nullptr, N,
                  h, V, WeightLayout::OutIn, false);
  st.dres.zero();
  norm_backward(normf_g_, normf_b_, s.x.data(), st.d_norm.data(), st.dres.data(), N);
}

void GptModel::block_backward(int layer, const BlockSaved& s, BackwardBuffers& st) {
  if (layer < 0 || layer >= spec_.layers)
    throw Error("GptModel: layer " + std::to_string(layer) + " out of range");
  if (s.x.empty() || s.ln1.empty() || s.qkv.empty() || s.probs.empty() || s.attn.empty() ||
      s.x1.empty() || s.ln2.empty() || s.up.empty() || s.act.empty() ||
      (spec_.dropout && (s.attn_mask.empty() || s.dropped.empty() || s.proj_mask.empty() ||
                         s.mlp_mask.empty())))
    throw Error("GptModel::block_backward: layer " + std::to_string(layer) +
                " lacks saved tensors (recompute them first)");
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t N = s.x.dim(0), batch = batch_of(s.x), S = spec_.seq_len;
  const std::int64_t h = spec_.hidden, f = spec_.ffn_hidden;
  const float drop_p = s.dropout.p;
  // MLP branch: st.dres holds the gradient of the block's output.
  const float* dy_down = st.dres.data();
  if (spec_.dropout) {
    dropout_apply(st.dres.data(), s.mlp_mask.data(), st.d_norm.data(), N * h, drop_p);
    dy_down = st.d_norm.data();
  }
  linear_backward(s.act.data(), p(b.w_down), dy_down, st.d_act.data(), g(b.w_down),
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
  const float* dy_proj = st.dres.data();
  if (spec_.dropout) {
    dropout_apply(st.dres.data(), s.proj_mask.data(), st.d_norm.data(), N * h, drop_p);
    dy_proj = st.d_norm.data();
  }
  linear_backward(s.attn.data(), p(b.w_proj), dy_proj, st.d_attn.data(), g(b.w_proj),
                  g(b.b_proj), N, h, h, WeightLayout::InOut, false);
  const AttentionDims dims{batch, S, spec_.heads, spec_.head_dim()};
  const AttentionDropout ad{s.attn_mask.data(), const_cast<float*>(s.dropped.data()), drop_p};
  attention_backward(s.qkv.data(), s.probs.data(), st.d_attn.data(), st.d_qkv.data(),
                     st.scratch.data(), dims, spec_.dropout ? &ad : nullptr);
  linear_backward(s.ln1.data(), p(b.w_qkv), st.d_qkv.data(), st.d_norm.data(), g(b.w_qkv),
                  g(b.b_qkv), N, h, 3 * h, WeightLayout::InOut, false);
  norm_backward(b.norm1_g, b.norm1_b, s.x.data(), st.d_norm.data(), st.dres.data(), N);
}

void GptModel::embedding_backward(const EmbeddingSaved& s, BackwardBuffers& st) {
  const std::int64_t batch = s.tokens.numel() / spec_.seq_len;
  if (spec_.dropout)
    dropout_apply(st.dres.data(), s.mask.data(), st.dres.data(), st.dres.numel(), s.dropout.p);
  cpu::embedding_backward(s.tokens.data(), st.dres.data(), g(tok_emb_), g(pos_emb_), batch,
                          spec_.seq_len, spec_.hidden);
}

double GptModel::run(std::span<const std::int32_t> tokens,
                     std::span<const std::int32_t> targets, std::int64_t batch, bool backward,
                     const StepOptions& opts) {
  const auto L = static_cast<std::size_t>(spec_.layers);
  if (!opts.layer_recompute.empty() && opts.layer_recompute.size() != L)
    throw Error("StepOptions: layer_recompute needs one entry per block (" + std::to_string(L) +
                ")");
  auto policy = [&](std::size_t l) {
    return opts.layer_recompute.empty() ? opts.recompute : opts.layer_recompute[l];
  };
  check_ids(targets, batch, "targets");

  EmbeddingSaved emb;
  Tensor x = embedding_forward(tokens, batch, emb, opts.dropout);
  std::vector<BlockSaved> saved(L);
  Bytes block_bytes = 0;
  for (std::size_t l = 0; l < L; ++l) {
    x = block_forward(static_cast<int>(l), std::move(x), saved[l], opts.dropout);
    if (backward) drop_for_recompute(saved[l], policy(l));
    block_bytes = std::max(block_bytes, saved[l].bytes());
  }
  HeadSaved head;
  const double mean = head_forward(std::move(x), targets, opts.loss_scale, head);
  saved_ = {emb.bytes(), block_bytes, head.bytes()};
  if (!backward) return mean;

  BackwardBuffers st = backward_buffers(batch);
  head_backward(head, st);
  head = HeadSaved{};
  for (std::size_t l = L; l-- > 0;) {
    recompute(static_cast<int>(l), saved[l]);
    block_backward(static_cast<int>(l), saved[l], st);
    saved[l] = BlockSaved{};  // its saved tensors die here
  }
  embedding_backward(emb, st);
  return mean;
}

double GptModel::forward_backward(std::span<const std::int32_t> tokens,
                                  std::span<const std::int32_t> targets, std::int64_t batch,
                                  const StepOptions& opts) {
  return run(tokens, targets, batch, true, opts);
}

double GptModel::loss(std::span<const std::int32_t> tokens,
                      std::span<const std::int32_t> targets, std::int64_t batch,
                      Dropout dropout) {
  return run(tokens, targets, batch, false, StepOptions{.dropout = dropout});
}

}  // namespace strata::backend::cpu
