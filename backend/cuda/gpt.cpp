#include "backend/cuda/gpt.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_bf16.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

namespace {

constexpr float kNormEps = 1e-5f;  // cpu::GptModel's
// Bytes of attention-backward scratch to aim for (one head's seq × seq
// matrix at least).
constexpr Bytes kScratchBytes = Bytes{64} << 20;

cost::ModelSpec checked_spec(cost::ModelSpec m) {
  const std::string who = "GptModel '" + m.name + "' (CUDA): ";
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.ffn_hidden == 0) m.ffn_hidden = 4 * m.hidden;
  if (m.layers < 1 || m.hidden < 1 || m.heads < 1 || m.vocab < 1 || m.seq_len < 1 || m.ffn_hidden < 1)
    throw Error(who + "layers, hidden, heads, ffn_hidden, vocab and seq_len must be >= 1");
  if (m.hidden % m.heads != 0) throw Error(who + "heads must divide hidden");
  if (m.kv_heads != m.heads) throw Error(who + "grouped-query attention (kv_heads != heads) is not implemented");
  if (m.moe) throw Error(who + "mixture of experts is not implemented");
  if (m.position_embedding != cost::PositionEmbedding::Learned &&
      m.position_embedding != cost::PositionEmbedding::None)
    throw Error(who + "only learned positions (or none) are implemented");
  return m;
}

std::uint64_t param_seed(std::uint64_t seed, int i) {
  return seed * 0x100000001b3ULL + static_cast<std::uint64_t>(i) + 1;
}

}  // namespace

void check_ids(std::span<const std::int32_t> ids, std::int64_t vocab, const char* what) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error(std::string(what) + " " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside [0, " + std::to_string(vocab) + ")");
}

Bytes BlockSaved::bytes() const {
  return x.bytes() + ln1.bytes() + qkv.bytes() + probs.bytes() + attn.bytes() + x1.bytes() +
         ln2.bytes() + up.bytes() + act.bytes();
}

GptModel::GptModel(const cost::ModelSpec& spec, DeviceAllocator& alloc, Ctx ctx, std::uint64_t seed,
                   cost::Precision precision)
    : spec_(checked_spec(spec)), alloc_(&alloc), ctx_(ctx), bf16_(precision == cost::Precision::BF16) {
  const auto& m = spec_;
  if (m.dropout)
    throw Error("GptModel '" + m.name + "' (CUDA): dropout is not implemented by the CUDA backend");
  if (precision != cost::Precision::FP32 && precision != cost::Precision::BF16)
    throw Error("GptModel '" + m.name + "' (CUDA): " + std::string(enum_name(precision)) +
                " is not implemented (fp32 and bf16 are)");
  const std::int64_t f = m.ffn_hidden;
  up_width_ = m.mlp == cost::MlpKind::Swiglu ? 2 * f : f;
  // Every tensor of the table, in its order (the CPU model's names, order
  // and whole shapes).
  table_ = ParamTable(m);
  for (int i = 0; i < table_.size(); ++i) add_param(table_[i].shape);
  tok_emb_ = table_.word_embedding();
  pos_emb_ = table_.find(ParamRole::PositionEmbedding);
  normf_g_ = table_.find(ParamRole::FinalNormGain);
  normf_b_ = table_.find(ParamRole::FinalNormBias);
  w_logits_ = table_.find(ParamRole::LogitsWeight);
  blocks_.resize(static_cast<std::size_t>(m.layers));
  for (int l = 0; l < static_cast<int>(m.layers); ++l) blocks_[static_cast<std::size_t>(l)] = table_.block(l);

  // The table's initialisation: normal ones from a counter-based generator
  // per tensor, gains 1, biases 0 (zero-filled).
  const cudaStream_t s = ctx_.stream;
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& ps = table_[i];
    auto& t = params_[static_cast<std::size_t>(i)];
    if (ps.init == Init::Normal)
      kernels::init_normal(s, t.data(), t.numel(), static_cast<float>(ps.sd), param_seed(seed, i));
    else if (ps.init == Init::Ones)
      kernels::fill(s, t.data(), t.numel(), 1.0f);
  }
  refresh_working();
}

void GptModel::add_param(Shape shape) {
  // bf16: the fp32 values are the master weights, which the memory model
  // counts with the optimizer's states (ZeRO's K = 12 for Adam: 4 + 8).
  params_.emplace_back(*alloc_, shape, bf16_ ? MemTag::OptimizerStates : MemTag::Params);
  grads_.emplace_back(*alloc_, shape, MemTag::Grads);
  if (bf16_) work_.emplace_back(*alloc_, shape, MemTag::Params, Fill::Uninitialised);
}

template <class T>
T* GptModel::w(int i) {
  if constexpr (std::is_same_v<T, float>) {
    return p(i);
  } else {
    return i < 0 ? nullptr : work_[static_cast<std::size_t>(i)].data();
  }
}

void GptModel::refresh_working() {
  for (std::size_t i = 0; i < work_.size(); ++i)
    kernels::cast(ctx_.stream, params_[i].data(), work_[i].data(), params_[i].numel());
}

std::int64_t GptModel::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& t : params_) n += t.numel();
  return n;
}

void GptModel::zero_grads() {
  for (auto& t : grads_) t.zero();
}

std::int64_t GptModel::scratch_heads() const {
  const Bytes one = spec_.seq_len * spec_.seq_len * dtype_bytes(dtype());
  return std::max<std::int64_t>(1, std::min<std::int64_t>(spec_.heads, kScratchBytes / one));
}

void GptModel::set_parameter(int i, std::span<const float> values) {
  params_.at(static_cast<std::size_t>(i)).upload(values);
  if (bf16_) {
    const auto k = static_cast<std::size_t>(i);
    kernels::cast(ctx_.stream, params_[k].data(), work_[k].data(), params_[k].numel());
    STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }
}

void GptModel::check_activation(const ActTensor& t, const char* who) const {
  if (t.empty() || t.shape().rank() != 2 || t.dim(1) != spec_.hidden || t.dim(0) % spec_.seq_len != 0)
    throw Error(std::string("GptModel::") + who + ": input must be [batch·seq_len × hidden], got " +
                t.shape().str());
  if (t.dtype() != dtype())
    throw Error(std::string("GptModel::") + who + ": input is " + dtype_name(t.dtype()) + ", the model computes in " +
                dtype_name(dtype()));
  if (alloc_->stream() != ctx_.stream)
    throw Error(std::string("GptModel::") + who +
                ": the allocator's stream is not the model's (allocations would race the ops)");
}

template <class T>
void GptModel::norm_forward(int gi, int bi, const T* x, T* y, std::int64_t rows) {
  if (spec_.norm == cost::NormKind::LayerNorm)
    kernels::layernorm_forward(ctx_.stream, x, w<T>(gi), w<T>(bi), y, rows, spec_.hidden, kNormEps);
  else
    kernels::rmsnorm_forward(ctx_.stream, x, w<T>(gi), y, rows, spec_.hidden, kNormEps);
}

template <class T>
void GptModel::norm_backward(int gi, int bi, const T* x, const T* dy, T* dx, float* stats, std::int64_t rows) {
  if (spec_.norm == cost::NormKind::LayerNorm)
    kernels::layernorm_backward(ctx_.stream, x, w<T>(gi), dy, dx, g(gi), g(bi), rows, spec_.hidden,
                                kNormEps, stats);
  else
    kernels::rmsnorm_backward(ctx_.stream, x, w<T>(gi), dy, dx, g(gi), rows, spec_.hidden, kNormEps, stats);
}

ActTensor GptModel::embedding_forward(const std::int32_t* tokens, std::int64_t batch,
                                         EmbeddingSaved& saved) {
  if (batch < 1) throw Error("GptModel: batch must be >= 1");
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden;
  saved.tokens = DeviceIndexTensor(*alloc_, {N}, MemTag::Activations, Fill::Uninitialised);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(saved.tokens.data(), tokens, static_cast<std::size_t>(saved.tokens.bytes()),
                                    cudaMemcpyDeviceToDevice, ctx_.stream));
  ActTensor out(*alloc_, {N, h}, dtype(), MemTag::Activations, Fill::Uninitialised);
  typed([&](auto tag) {
    using T = decltype(tag);
    kernels::embedding_forward(ctx_.stream, saved.tokens.data(), w<T>(tok_emb_), w<T>(pos_emb_), out.as<T>(), batch,
                               S, h);
  });
  return out;
}

// Runs the block from s.x, filling every saved tensor that is empty (all of
// them after a plain forward; the dropped ones when recomputing).
template <class T>
void GptModel::block_forward_into(int layer, BlockSaved& s, ActTensor* out) {
  if (layer < 0 || layer >= spec_.layers) throw Error("GptModel: layer " + std::to_string(layer) + " out of range");
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t N = s.x.dim(0), batch = batch_of(s.x), S = spec_.seq_len;
  const std::int64_t h = spec_.hidden, f = spec_.ffn_hidden;
  const auto act = MemTag::Activations;
  const auto none = Fill::Uninitialised;
  const DType dt = dtype();
  const Ctx& c = ctx_;
  if (s.ln1.empty()) {
    s.ln1 = ActTensor(*alloc_, {N, h}, dt, act, none);
    norm_forward<T>(b.norm1_g, b.norm1_b, s.x.as<T>(), s.ln1.as<T>(), N);
  }
  if (s.qkv.empty()) {
    s.qkv = ActTensor(*alloc_, {N, 3 * h}, dt, act, none);
    linear_forward(c, s.ln1.as<T>(), w<T>(b.w_qkv), w<T>(b.b_qkv), s.qkv.as<T>(), N, h, 3 * h, WeightLayout::InOut,
                   false);
  }
  if (s.probs.empty()) {
    // Selective recompute refills only the core (attn was kept).
    const bool need_attn = s.attn.empty();
    s.probs = ActTensor(*alloc_, {batch, spec_.heads, S, S}, dt, act, none);
    if (need_attn) s.attn = ActTensor(*alloc_, {N, h}, dt, act, none);
    attention_forward(c, s.qkv.as<T>(), s.probs.as<T>(), need_attn ? s.attn.as<T>() : nullptr,
                      {batch, S, spec_.heads, spec_.head_dim()});
  }
  if (s.x1.empty()) {
    // x1 = x + attn·W + b: the residual add folded into the product.
    s.x1 = s.x.clone(act);
    linear_forward(c, s.attn.as<T>(), w<T>(b.w_proj), w<T>(b.b_proj), s.x1.as<T>(), N, h, h, WeightLayout::InOut,
                   true);
  }
  if (s.ln2.empty()) {
    s.ln2 = ActTensor(*alloc_, {N, h}, dt, act, none);
    norm_forward<T>(b.norm2_g, b.norm2_b, s.x1.as<T>(), s.ln2.as<T>(), N);
  }
  if (s.up.empty()) {
    s.up = ActTensor(*alloc_, {N, up_width_}, dt, act, none);
    linear_forward(c, s.ln2.as<T>(), w<T>(b.w_up), w<T>(b.b_up), s.up.as<T>(), N, h, up_width_, WeightLayout::InOut,
                   false);
  }
  if (s.act.empty()) {
    s.act = ActTensor(*alloc_, {N, f}, dt, act, none);
    if (spec_.mlp == cost::MlpKind::Gelu)
      kernels::gelu_forward(c.stream, s.up.as<T>(), s.act.as<T>(), N * f);
    else
      kernels::swiglu_forward(c.stream, s.up.as<T>(), s.act.as<T>(), N, f);
  }
  if (out != nullptr) {
    *out = s.x1.clone(act);
    linear_forward(c, s.act.as<T>(), w<T>(b.w_down), w<T>(b.b_down), out->as<T>(), N, f, h, WeightLayout::InOut,
                   true);
  }
}

ActTensor GptModel::block_forward(int layer, ActTensor input, BlockSaved& saved) {
  check_activation(input, "block_forward");
  saved = BlockSaved{};
  saved.x = std::move(input);
  ActTensor out;
  typed([&](auto tag) { block_forward_into<decltype(tag)>(layer, saved, &out); });
  return out;
}

void GptModel::drop_for_recompute(BlockSaved& s, cost::Recompute policy) {
  switch (policy) {
    case cost::Recompute::None: return;
    case cost::Recompute::Selective: s.probs.release(); return;
    case cost::Recompute::Full: {
      ActTensor x = std::move(s.x);
      s = BlockSaved{};
      s.x = std::move(x);
      return;
    }
    default:
      throw Error("recompute policy '" + std::string(enum_name(policy)) +
                  "' is a schedule over layers: give each layer None, Selective or Full");
  }
}

void GptModel::recompute(int layer, BlockSaved& saved) {
  if (saved.x.empty()) throw Error("GptModel::recompute: the block's input was not kept");
  check_activation(saved.x, "recompute");
  typed([&](auto tag) { block_forward_into<decltype(tag)>(layer, saved, nullptr); });
}

void GptModel::head_forward(ActTensor input, const std::int32_t* targets, float loss_scale,
                            HeadSaved& s, double* loss) {
  check_activation(input, "head_forward");
  const std::int64_t N = input.dim(0), h = spec_.hidden, V = spec_.vocab;
  s = HeadSaved{};
  s.x = std::move(input);
  s.ln = ActTensor(*alloc_, {N, h}, dtype(), MemTag::Activations, Fill::Uninitialised);
  // The logits are fp32 in both precisions (bf16: a bf16 product with an
  // fp32 output), and the loss is computed in fp32 from them, as the memory
  // model's head keeps them (Megatron-LM's cross-entropy upcasts the logits).
  s.logits = ActTensor(*alloc_, {N, V}, DType::F32, MemTag::Activations, Fill::Uninitialised);
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  typed([&](auto tag) {
    using T = decltype(tag);
    norm_forward<T>(normf_g_, normf_b_, s.x.as<T>(), s.ln.as<T>(), N);
    linear_forward(ctx_, s.ln.as<T>(), w<T>(w_out), nullptr, s.logits.as<float>(), N, h, V, WeightLayout::OutIn,
                   false);
  });
  BasicDeviceTensor<double> row_loss(*alloc_, {N}, MemTag::Workspace, Fill::Uninitialised);
  kernels::cross_entropy_forward(ctx_.stream, s.logits.as<float>(), targets, N, V, row_loss.data());
  kernels::sum_into(ctx_.stream, row_loss.data(), N, 1.0 / static_cast<double>(N), loss);
  kernels::cross_entropy_backward(ctx_.stream, s.logits.as<float>(), targets, N, V,
                                  loss_scale / static_cast<float>(N));
}

BackwardBuffers GptModel::backward_buffers(std::int64_t batch) {
  const std::int64_t S = spec_.seq_len, N = batch * S, h = spec_.hidden;
  const auto act = MemTag::Activations;
  const auto none = Fill::Uninitialised;
  const DType dt = dtype();
  BackwardBuffers b;
  b.dres = ActTensor(*alloc_, {N, h}, dt, act);
  b.d_norm = ActTensor(*alloc_, {N, h}, dt, act, none);
  b.d_attn = ActTensor(*alloc_, {N, h}, dt, act, none);
  b.d_qkv = ActTensor(*alloc_, {N, 3 * h}, dt, act, none);
  b.d_act = ActTensor(*alloc_, {N, spec_.ffn_hidden}, dt, act, none);
  if (spec_.mlp == cost::MlpKind::Swiglu) b.d_up = ActTensor(*alloc_, {N, up_width_}, dt, act, none);
  b.scratch = ActTensor(*alloc_, {scratch_heads(), S, S}, dt, MemTag::Workspace, none);
  b.stats = DeviceTensor(*alloc_, {2 * N}, MemTag::Workspace, none);
  return b;
}

void GptModel::head_backward(const HeadSaved& s, BackwardBuffers& st) {
  check_activation(s.x, "head_backward");
  typed([&](auto tag) { head_backward_impl<decltype(tag)>(s, st); });
}

template <class T>
void GptModel::head_backward_impl(const HeadSaved& s, BackwardBuffers& st) {
  const std::int64_t N = s.x.dim(0), h = spec_.hidden, V = spec_.vocab;
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  if constexpr (std::is_same_v<T, float>) {
    linear_backward(ctx_, s.ln.as<float>(), p(w_out), s.logits.as<float>(), st.d_norm.as<float>(), g(w_out), nullptr,
                    N, h, V, WeightLayout::OutIn, false);
  } else {
    // The fp32 gradient formed in place over the softmax is cast to bf16 for
    // the products; both are live while they run, as the memory model's
    // head holds them (docs/memory-model.md, activations).
    ActTensor dlogits(*alloc_, {N, V}, DType::BF16, MemTag::Activations, Fill::Uninitialised);
    kernels::cast(ctx_.stream, s.logits.as<float>(), dlogits.as<Bf16>(), N * V);
    linear_backward(ctx_, s.ln.as<Bf16>(), w<Bf16>(w_out), dlogits.as<Bf16>(), st.d_norm.as<Bf16>(), g(w_out),
                    nullptr, N, h, V, WeightLayout::OutIn, false);
  }
  st.dres.zero();
  norm_backward<T>(normf_g_, normf_b_, s.x.as<T>(), st.d_norm.as<T>(), st.dres.as<T>(), st.stats.data(), N);
}

void GptModel::block_backward(int layer, const BlockSaved& s, BackwardBuffers& st) {
  if (layer < 0 || layer >= spec_.layers) throw Error("GptModel: layer " + std::to_string(layer) + " out of range");
  if (s.x.empty() || s.ln1.empty() || s.qkv.empty() || s.probs.empty() || s.attn.empty() ||
      s.x1.empty() || s.ln2.empty() || s.up.empty() || s.act.empty())
    throw Error("GptModel::block_backward: layer " + std::to_string(layer) +
                " lacks saved tensors (recompute them first)");
  check_activation(s.x, "block_backward");
  typed([&](auto tag) { block_backward_impl<decltype(tag)>(layer, s, st); });
}

template <class T>
void GptModel::block_backward_impl(int layer, const BlockSaved& s, BackwardBuffers& st) {
  const auto& b = blocks_[static_cast<std::size_t>(layer)];
  const std::int64_t N = s.x.dim(0), batch = batch_of(s.x), S = spec_.seq_len;
  const std::int64_t h = spec_.hidden, f = spec_.ffn_hidden;
  const Ctx& c = ctx_;
  // MLP branch: st.dres holds the gradient of the block's output.
  linear_backward(c, s.act.as<T>(), w<T>(b.w_down), st.dres.as<T>(), st.d_act.as<T>(), g(b.w_down), g(b.b_down), N,
                  f, h, WeightLayout::InOut, false);
  T* d_up = st.d_act.as<T>();
  if (spec_.mlp == cost::MlpKind::Gelu) {
    kernels::gelu_backward(c.stream, s.up.as<T>(), st.d_act.as<T>(), st.d_act.as<T>(), N * f);
  } else {
    kernels::swiglu_backward(c.stream, s.up.as<T>(), st.d_act.as<T>(), st.d_up.as<T>(), N, f);
    d_up = st.d_up.as<T>();
  }
  linear_backward(c, s.ln2.as<T>(), w<T>(b.w_up), d_up, st.d_norm.as<T>(), g(b.w_up), g(b.b_up), N, h, up_width_,
                  WeightLayout::InOut, false);
  norm_backward<T>(b.norm2_g, b.norm2_b, s.x1.as<T>(), st.d_norm.as<T>(), st.dres.as<T>(), st.stats.data(), N);
  // Attention branch: st.dres now holds the gradient of x1.
  linear_backward(c, s.attn.as<T>(), w<T>(b.w_proj), st.dres.as<T>(), st.d_attn.as<T>(), g(b.w_proj), g(b.b_proj),
                  N, h, h, WeightLayout::InOut, false);
  attention_backward(c, s.qkv.as<T>(), s.probs.as<T>(), st.d_attn.as<T>(), st.d_qkv.as<T>(), st.scratch.as<T>(),
                     st.scratch.dim(0), {batch, S, spec_.heads, spec_.head_dim()});
  linear_backward(c, s.ln1.as<T>(), w<T>(b.w_qkv), st.d_qkv.as<T>(), st.d_norm.as<T>(), g(b.w_qkv), g(b.b_qkv), N, h,
                  3 * h, WeightLayout::InOut, false);
  norm_backward<T>(b.norm1_g, b.norm1_b, s.x.as<T>(), st.d_norm.as<T>(), st.dres.as<T>(), st.stats.data(), N);
}

void GptModel::embedding_backward(const EmbeddingSaved& s, BackwardBuffers& st) {
  const std::int64_t batch = s.tokens.numel() / spec_.seq_len;
  typed([&](auto tag) {
    kernels::embedding_backward(ctx_.stream, s.tokens.data(), st.dres.as<decltype(tag)>(), g(tok_emb_), g(pos_emb_),
                                batch, spec_.seq_len, spec_.hidden);
  });
}

double GptModel::forward_backward(std::span<const std::int32_t> tokens,
                                  std::span<const std::int32_t> targets, std::int64_t batch,
                                  const StepOptions& opts) {
  const auto L = static_cast<std::size_t>(spec_.layers);
  const auto n = static_cast<std::size_t>(batch * spec_.seq_len);
  if (batch < 1 || tokens.size() != n || targets.size() != n)
    throw Error("GptModel::forward_backward: tokens and targets must hold batch·seq_len = " +
                std::to_string(n) + " ids");
  if (opts.dropout.p != 0.0f) throw Error("GptModel (CUDA): dropout is not implemented");
  if (!opts.layer_recompute.empty() && opts.layer_recompute.size() != L)
    throw Error("StepOptions: layer_recompute needs one entry per block (" + std::to_string(L) + ")");
  check_ids(tokens, spec_.vocab, "token");
  check_ids(targets, spec_.vocab, "target");
  DeviceIndexTensor dtok(*alloc_, {batch * spec_.seq_len}, MemTag::Other, Fill::Uninitialised);
  DeviceIndexTensor dtgt(*alloc_, {batch * spec_.seq_len}, MemTag::Other, Fill::Uninitialised);
  dtok.upload(tokens);
  dtgt.upload(targets);
  BasicDeviceTensor<double> loss(*alloc_, {1}, MemTag::Other);
  auto policy = [&](std::size_t l) { return opts.layer_recompute.empty() ? opts.recompute : opts.layer_recompute[l]; };

  EmbeddingSaved emb;
  ActTensor x = embedding_forward(dtok.data(), batch, emb);
  std::vector<BlockSaved> saved(L);
  for (std::size_t l = 0; l < L; ++l) {
    x = block_forward(static_cast<int>(l), std::move(x), saved[l]);
    drop_for_recompute(saved[l], policy(l));
  }
  HeadSaved head;
  head_forward(std::move(x), dtgt.data(), opts.loss_scale, head, loss.data());
  BackwardBuffers st = backward_buffers(batch);
  head_backward(head, st);
  head = HeadSaved{};
  for (std::size_t l = L; l-- > 0;) {
    recompute(static_cast<int>(l), saved[l]);
    block_backward(static_cast<int>(l), saved[l], st);
    saved[l] = BlockSaved{};
  }
  embedding_backward(emb, st);
  return loss.download()[0];
}

}  // namespace strata::backend::cuda
