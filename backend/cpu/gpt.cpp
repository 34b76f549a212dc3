#include "backend/cpu/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/kernels.hpp"
#include "backend/common/rng.hpp"
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

bool ParamSlice::is_whole() const {
  const std::int64_t rows = whole.rank() == 2 ? whole[0] : 1;
  const std::int64_t cols = whole.rank() == 2 ? whole[1] : whole[0];
  return row_begin == 0 && row_end == rows && cols_size() == cols;
}

std::int64_t ParamSlice::cols_size() const {
  std::int64_t n = 0;
  for (const auto& [b, e] : cols) n += e - b;
  return n;
}

Shape ParamSlice::local_shape() const {
  if (whole.rank() == 1) return {cols_size()};
  return {row_end - row_begin, cols_size()};
}

std::int64_t ParamSlice::whole_index(std::int64_t i) const {
  const std::int64_t local_cols = cols_size();
  const std::int64_t whole_cols = whole.rank() == 2 ? whole[1] : whole[0];
  const std::int64_t row = row_begin + i / local_cols;
  std::int64_t c = i % local_cols;
  for (const auto& [b, e] : cols) {
    if (c < e - b) return row * whole_cols + b + c;
    c -= e - b;
  }
  throw Error("ParamSlice: local element " + std::to_string(i) + " out of range");
}

Bytes BlockSaved::bytes() const {
  return x.bytes() + ln1.bytes() + qkv.bytes() + probs.bytes() + attn_mask.bytes() +
         dropped.bytes() + attn.bytes() + proj_mask.bytes() + x1.bytes() + ln2.bytes() +
         up.bytes() + act.bytes() + mlp_mask.bytes();
}

std::vector<std::int32_t> ContextParallel::positions(std::int64_t seq, int cp, int rank) {
  std::vector<std::int32_t> v;
  if (cp == 1) {
    for (std::int64_t i = 0; i < seq; ++i) v.push_back(static_cast<std::int32_t>(i));
    return v;
  }
  const std::int64_t c = seq / (2 * cp);
  for (const std::int64_t chunk : {static_cast<std::int64_t>(rank), 2 * cp - 1 - static_cast<std::int64_t>(rank)})
    for (std::int64_t i = 0; i < c; ++i) v.push_back(static_cast<std::int32_t>(chunk * c + i));
  return v;
}

GptModel::GptModel(const cost::ModelSpec& spec, Allocator& alloc, std::uint64_t seed,
                   TensorParallel tp, ContextParallel cp,
                   const std::function<bool(int)>& keep)
    : spec_(checked_spec(spec)), alloc_(&alloc), tp_(tp), cp_(cp) {
  const auto& m = spec_;
  const std::int64_t f = m.ffn_hidden;
  const bool swiglu = m.mlp == cost::MlpKind::Swiglu;
  const std::int64_t t = tp_.size(), r = tp_.rank();
  if (t > 1) {
    const std::string who = "GptModel '" + m.name + "' with tp " + std::to_string(t) + ": ";
    if (m.dropout) throw Error(who + "dropout is not implemented with tensor parallelism");
    if (m.heads % t != 0 || f % t != 0 || m.vocab % t != 0)
      throw Error(who + "heads, ffn_hidden and vocab must divide by tp");
    if (tp_.sequence_parallel && m.seq_len % t != 0)
      throw Error(who + "sequence parallelism needs seq_len divisible by tp");
  }
  if (cp_.size() > 1) {
    const std::string who = "GptModel '" + m.name + "' with cp " + std::to_string(cp_.size()) + ": ";
    if (m.dropout) throw Error(who + "dropout is not implemented with context parallelism");
    if (m.seq_len % (2 * cp_.size()) != 0) throw Error(who + "seq_len must divide by 2·cp");
  }
  seq_ = m.seq_len / cp_.size();
  for (int q = 0; q < cp_.size(); ++q)
    group_positions_.push_back(ContextParallel::positions(m.seq_len, cp_.size(), q));
  if (tp_.sequence_parallel && t > 1 && seq_ % t != 0)
    throw Error("GptModel '" + m.name + "': sequence parallelism needs seq_len/cp divisible by tp");
  heads_ = m.heads / t;
  attn_width_ = heads_ * m.head_dim();
  ffn_ = f / t;
  vocab_ = m.vocab / t;
  vocab_begin_ = r * vocab_;
  up_width_ = swiglu ? 2 * ffn_ : ffn_;

  // Slices of the whole parameters (Megatron-LM's split, the table's rule):
  // rows of a row-parallel weight or of a vocabulary-split table, column
  // runs of a column-parallel one (Q | K | V, gate | up: the local part of
  // each).
  auto whole = [](Shape sh) {
    ParamSlice p;
    p.whole = sh;
    p.row_end = sh.rank() == 2 ? sh[0] : 1;
    p.cols = {{0, sh.rank() == 2 ? sh[1] : sh[0]}};
    return p;
  };
  auto by_rows = [&](Shape sh) {
    ParamSlice p = whole(sh);
    const std::int64_t n = sh[0] / t;
    p.row_begin = r * n;
    p.row_end = (r + 1) * n;
    return p;
  };
  auto by_cols = [&](Shape sh, std::int64_t parts) {
    ParamSlice p = whole(sh);
    const std::int64_t part = (sh.rank() == 2 ? sh[1] : sh[0]) / parts, n = part / t;
    p.cols.clear();
    for (std::int64_t j = 0; j < parts; ++j) p.cols.emplace_back(j * part + r * n, j * part + (r + 1) * n);
    return p;
  };

  // Every tensor of the table, in its order; storage only for the kept ones.
  table_ = ParamTable(m);
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& ps = table_[i];
    ParamSlice slice = ps.split == TpSplit::Rows      ? by_rows(ps.shape)
                       : ps.split == TpSplit::Columns ? by_cols(ps.shape, ps.parts)
                                                      : whole(ps.shape);
    const Shape shape = slice.local_shape();
    if (!keep || keep(i)) {
      params_.emplace_back(*alloc_, shape, MemTag::Params);
      grads_.emplace_back(*alloc_, shape, MemTag::Grads);
    } else {
      params_.emplace_back();
      grads_.emplace_back();
    }
    slices_.push_back(std::move(slice));
  }
  tok_emb_ = table_.word_embedding();
  pos_emb_ = table_.find(ParamRole::PositionEmbedding);
  normf_g_ = table_.find(ParamRole::FinalNormGain);
  normf_b_ = table_.find(ParamRole::FinalNormBias);
  w_logits_ = table_.find(ParamRole::LogitsWeight);
  blocks_.resize(static_cast<std::size_t>(m.layers));
  for (int l = 0; l < static_cast<int>(m.layers); ++l) blocks_[static_cast<std::size_t>(l)] = table_.block(l);

  // Norms see only this rank's rows under sequence parallelism.
  grad_split_by_rows_.assign(params_.size(), false);
  if (tp_.split_rows())
    for (int i = 0; i < table_.size(); ++i) grad_split_by_rows_[static_cast<std::size_t>(i)] = table_[i].norm;

  // The whole model's values in the single-rank order; this rank keeps its
  // slice of each.
  Rng rng(seed);
  auto normal = [&](int i, double sd) {
    const ParamSlice& sl = slices_[static_cast<std::size_t>(i)];
    float* dst = params_[static_cast<std::size_t>(i)].data();  // null: not kept, values drawn only
    const std::int64_t rows = sl.whole.rank() == 2 ? sl.whole[0] : 1;
    const std::int64_t cols = sl.whole.rank() == 2 ? sl.whole[1] : sl.whole[0];
    const std::int64_t local_cols = sl.cols_size();
    for (std::int64_t row = 0; row < rows; ++row) {
      std::size_t run = 0;
      std::int64_t before = 0;  // local columns in earlier runs
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto v = static_cast<float>(sd * rng.normal());
        if (dst == nullptr || row < sl.row_begin || row >= sl.row_end) continue;
        while (run < sl.cols.size() && c >= sl.cols[run].second) {
          before += sl.cols[run].second - sl.cols[run].first;
          ++run;
        }
        if (run < sl.cols.size() && c >= sl.cols[run].first)
          dst[(row - sl.row_begin) * local_cols + before + (c - sl.cols[run].first)] = v;
      }
    }
  };
  // Gains 1, biases 0 (the storage is zero-filled), the normal ones drawn
  // in table order.
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& ps = table_[i];
    if (ps.init == Init::Normal) {
      normal(i, ps.sd);
    } else if (ps.init == Init::Ones) {
      for (float& v : params_[static_cast<std::size_t>(i)].span()) v = 1.0f;
    }
  }
}

bool GptModel::grad_split_by_rows(int i) const {
  return grad_split_by_rows_[static_cast<std::size_t>(i)];
}

std::int64_t GptModel::rows(std::int64_t batch) const {
  return batch * seq_ / (tp_.split_rows() ? tp_.size() : 1);
}

void GptModel::gather_rows(const float* mine, float* whole, std::int64_t N) {
  const std::int64_t h = spec_.hidden;
  tp_.comm->all_gather({mine, static_cast<std::size_t>(N / tp_.size() * h)},
                       {whole, static_cast<std::size_t>(N * h)});
}

void GptModel::reduce_rows(float* whole, float* mine, std::int64_t N) {
  const std::int64_t h = spec_.hidden;
  const std::span<float> w{whole, static_cast<std::size_t>(N * h)};
  if (tp_.split_rows()) {
    tp_.comm->reduce_scatter(w, {mine, static_cast<std::size_t>(N / tp_.size() * h)});
    return;
  }
  tp_.comm->all_reduce(w);
  if (mine != whole) std::memcpy(mine, whole, w.size_bytes());
}

const float* GptModel::whole_rows(const Tensor& mine, BackwardBuffers& st) {
  if (!tp_.split_rows()) return mine.data();
  gather_rows(mine.data(), st.gathered.data(), st.gathered.dim(0));
  return st.gathered.data();
}

const float* GptModel::reduced_rows(BackwardBuffers& st, std::int64_t N) {
  if (tp_.size() == 1) return st.d_norm.data();
  float* mine = tp_.split_rows() ? st.shard.data() : st.d_norm.data();
  reduce_rows(st.d_norm.data(), mine, N);
  return mine;
}

void GptModel::row_parallel_out(const float* in, int w, int bias, const float* x, Tensor& y,
                                std::int64_t N, std::int64_t in_features) {
  Allocator& a = *alloc_;
  const std::int64_t h = spec_.hidden, rows = N / (tp_.split_rows() ? tp_.size() : 1);
  if (tp_.size() == 1) {
    // y = x + in·W + b: the residual add folded into the product.
    y = Tensor(a, {N, h}, MemTag::Activations);
    std::memcpy(y.data(), x, static_cast<std::size_t>(N * h) * sizeof(float));
    linear_forward(in, p(w), p(bias), y.data(), N, in_features, h, WeightLayout::InOut, true);
    return;
  }
  Tensor partial(a, {N, h}, MemTag::Activations);
  linear_forward(in, p(w), nullptr, partial.data(), N, in_features, h, WeightLayout::InOut, false);
  if (tp_.split_rows()) {
    y = Tensor(a, {rows, h}, MemTag::Activations);
    reduce_rows(partial.data(), y.data(), N);
  } else {
    reduce_rows(partial.data(), partial.data(), N);
    y = std::move(partial);
  }
  const float* bv = p(bias);
  float* yv = y.data();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < h; ++i)
      yv[r * h + i] += x[r * h + i] + (bv != nullptr ? bv[i] : 0.0f);
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
  const std::int64_t n = batch * seq_;
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
  const std::int64_t S = seq_, N = batch * S, h = spec_.hidden;
  saved.tokens = IndexTensor(*alloc_, {N}, MemTag::Activations);
  std::memcpy(saved.tokens.data(), tokens.data(), static_cast<std::size_t>(N) * sizeof(std::int32_t));
  Tensor out;
  if (tp_.size() == 1 && cp_.size() == 1) {
    out = Tensor(*alloc_, {N, h}, MemTag::Activations);
    cpu::embedding_forward(saved.tokens.data(), p(tok_emb_), p(pos_emb_), out.data(), batch, S, h,
                           spec_.vocab);
  } else {
    // Each rank looks up its vocabulary rows; the tp group sums the parts
    // (reduce-scatters them by rows with sequence parallelism). Positions
    // are the rank's own (context parallelism).
    Tensor whole(*alloc_, {N, h}, MemTag::Activations);
    embedding_forward_part(saved.tokens.data(), p(tok_emb_), whole.data(), N, h, spec_.vocab,
                           vocab_begin_, vocab_);
    const std::int64_t rows = this->rows(batch);
    if (tp_.split_rows()) {
      out = Tensor(*alloc_, {rows, h}, MemTag::Activations);
      reduce_rows(whole.data(), out.data(), N);
    } else {
      if (tp_.size() > 1) reduce_rows(whole.data(), whole.data(), N);
      out = std::move(whole);
    }
    if (pos_emb_ >= 0)
      add_positions(out.data(), p(pos_emb_), rows, tp_.split_rows() ? tp_.rank() * rows : 0, S, h,
                    positions().data());
  }
  saved.dropout = dropout;
  if (spec_.dropout) {
    saved.mask = make_mask(*alloc_, {N, h}, dropout, -1, DropSite::Embedding);
    dropout_apply(out.data(), saved.mask.data(), out.data(), N * h, dropout.p);
  }
  return out;
}

Tensor GptModel::gather_kv(const Tensor& qkv, std::int64_t batch) {
  Allocator& a = *alloc_;
  const int cp = cp_.size();
  const std::int64_t aw = attn_width_, N = batch * seq_, S = spec_.seq_len;
  Tensor mine(a, {N, 2 * aw}, MemTag::Activations), all(a, {cp * N, 2 * aw}, MemTag::Activations);
  for (std::int64_t r = 0; r < N; ++r)
    std::memcpy(mine.data() + r * 2 * aw, qkv.data() + r * 3 * aw + aw,
                static_cast<std::size_t>(2 * aw) * sizeof(float));
  cp_.comm->all_gather(mine.span(), all.span());
  mine.release();
  Tensor kv(a, {batch * S, 2 * aw}, MemTag::Activations);
  for (int q = 0; q < cp; ++q) {
    const auto& pos = group_positions_[static_cast<std::size_t>(q)];
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < seq_; ++i)
        std::memcpy(kv.data() + (b * S + pos[static_cast<std::size_t>(i)]) * 2 * aw,
                    all.data() + ((q * batch + b) * seq_ + i) * 2 * aw,
                    static_cast<std::size_t>(2 * aw) * sizeof(float));
  }
  return kv;
}

void GptModel::scatter_kv_grads(const Tensor& dkv, float* dqkv, std::int64_t batch) {
  Allocator& a = *alloc_;
  const int cp = cp_.size();
  const std::int64_t aw = attn_width_, N = batch * seq_, S = spec_.seq_len;
  // In the all-gather's order (owner after owner), then reduce-scattered.
  Tensor ordered(a, {cp * N, 2 * aw}, MemTag::Activations);
  for (int q = 0; q < cp; ++q) {
    const auto& pos = group_positions_[static_cast<std::size_t>(q)];
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < seq_; ++i)
        std::memcpy(ordered.data() + ((q * batch + b) * seq_ + i) * 2 * aw,
                    dkv.data() + (b * S + pos[static_cast<std::size_t>(i)]) * 2 * aw,
                    static_cast<std::size_t>(2 * aw) * sizeof(float));
  }
  Tensor mine(a, {N, 2 * aw}, MemTag::Activations);
  cp_.comm->reduce_scatter(ordered.span(), mine.span());
  for (std::int64_t r = 0; r < N; ++r)
    std::memcpy(dqkv + r * 3 * aw + aw, mine.data() + r * 2 * aw,
                static_cast<std::size_t>(2 * aw) * sizeof(float));
}

void GptModel::attention_core(const BlockSaved& s, float* probs, float* out) {
  if (cp_.size() > 1) {
    const std::int64_t batch = batch_of(s.x);
    const Tensor kv = gather_kv(s.qkv, batch);
    attention_forward_cp(s.qkv.data(), kv.data(), positions().data(), probs, out,
                         {batch, seq_, spec_.seq_len, heads_, spec_.head_dim()});
    return;
  }
  const AttentionDims dims{batch_of(s.x), spec_.seq_len, heads_, spec_.head_dim()};
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
  // Rows here (the residual stream's, split by tp under sequence
  // parallelism) and tokens of the microbatch.
  const std::int64_t rows = s.x.dim(0), batch = batch_of(s.x), S = seq_, N = batch * S;
  const std::int64_t S_all = spec_.seq_len;  // keys each query may see
  const std::int64_t h = spec_.hidden, f = ffn_, aw = attn_width_;
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;
  // A column-parallel linear's input: the whole rows, gathered under
  // sequence parallelism (and not kept).
  Tensor gathered;
  auto whole_rows = [&](const Tensor& mine) -> const float* {
    if (!tp_.split_rows()) return mine.data();
    gathered = Tensor(a, {N, h}, act);
    gather_rows(mine.data(), gathered.data(), N);
    return gathered.data();
  };

  if (s.ln1.empty()) {
    s.ln1 = Tensor(a, {rows, h}, act);
    norm_forward(b.norm1_g, b.norm1_b, s.x.data(), s.ln1.data(), rows);
  }
  if (s.qkv.empty()) {
    const float* in = whole_rows(s.ln1);
    s.qkv = Tensor(a, {N, 3 * aw}, act);
    linear_forward(in, p(b.w_qkv), p(b.b_qkv), s.qkv.data(), N, h, 3 * aw, WeightLayout::InOut,
                   false);
    gathered.release();
  }
  const Dropout& dr = s.dropout;
  if (s.probs.empty()) {
    // Selective recompute refills only the core (attn was kept).
    const bool need_attn = s.attn.empty();
    s.probs = Tensor(a, {batch, heads_, S, S_all}, act);
    if (spec_.dropout) {  // cp 1 only
      s.attn_mask = make_mask(a, {batch, heads_, S, S}, dr, layer, DropSite::Attention);
      s.dropped = Tensor(a, {batch, heads_, S, S}, act);
    }
    if (need_attn) s.attn = Tensor(a, {N, aw}, act);
    attention_core(s, s.probs.data(), need_attn ? s.attn.data() : nullptr);
  }
  if (spec_.dropout && s.proj_mask.empty())
    s.proj_mask = make_mask(a, {N, h}, dr, layer, DropSite::Projection);
  if (spec_.dropout && s.mlp_mask.empty())
    s.mlp_mask = make_mask(a, {N, h}, dr, layer, DropSite::Mlp);
  if (s.x1.empty()) {
    if (spec_.dropout) {  // tp 1 only
      // x1 = x + dropout(attn·W + b).
      s.x1 = Tensor(a, {N, h}, act);
      linear_forward(s.attn.data(), p(b.w_proj), p(b.b_proj), s.x1.data(), N, h, h,
                     WeightLayout::InOut, false);
      dropout_apply(s.x1.data(), s.proj_mask.data(), s.x1.data(), N * h, dr.p);
      residual_forward(s.x1.data(), s.x.data(), s.x1.data(), N * h);
    } else {
      row_parallel_out(s.attn.data(), b.w_proj, b.b_proj, s.x.data(), s.x1, N, aw);
    }
  }
  if (s.ln2.empty()) {
    s.ln2 = Tensor(a, {rows, h}, act);
    norm_forward(b.norm2_g, b.norm2_b, s.x1.data(), s.ln2.data(), rows);
  }
  if (s.up.empty()) {
    const float* in = whole_rows(s.ln2);
    s.up = Tensor(a, {N, up_width_}, act);
    linear_forward(in, p(b.w_up), p(b.b_up), s.up.data(), N, h, up_width_, WeightLayout::InOut,
                   false);
    gathered.release();
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
      row_parallel_out(s.act.data(), b.w_down, b.b_down, s.x1.data(), *out, N, f);
    }
  }
}

void GptModel::check_activation(const Tensor& t, const char* who) const {
  const std::int64_t split = tp_.split_rows() ? tp_.size() : 1;
  if (t.empty() || t.shape().rank() != 2 || t.dim(1) != spec_.hidden ||
      t.dim(0) * split % seq_ != 0)
    throw Error(std::string("GptModel::") + who + ": input must be [batch·seq_len" +
                (split > 1 ? "/tp" : "") + " × hidden], got " + t.shape().str());
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
  const std::int64_t rows = input.dim(0), batch = batch_of(input), h = spec_.hidden,
                     N = batch * seq_, V = vocab_;
  check_ids(targets, batch, "targets");
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;
  s = HeadSaved{};
  s.x = std::move(input);
  s.ln = Tensor(a, {rows, h}, act);
  norm_forward(normf_g_, normf_b_, s.x.data(), s.ln.data(), rows);
  Tensor gathered;
  const float* in = s.ln.data();
  if (tp_.split_rows()) {
    gathered = Tensor(a, {N, h}, act);
    gather_rows(s.ln.data(), gathered.data(), N);
    in = gathered.data();
  }
  s.logits = Tensor(a, {N, V}, act);
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  linear_forward(in, p(w_out), nullptr, s.logits.data(), N, h, V, WeightLayout::OutIn, false);
  gathered.release();
  double sum = 0;
  if (tp_.size() == 1) {
    sum = cross_entropy_forward(s.logits.data(), targets.data(), N, V);
  } else {
    // Vocabulary-parallel cross-entropy: the row maxima and the two sums
    // over the group, so every rank gets the whole softmax's denominators.
    const int t = tp_.size();
    Tensor mx(a, {N}, MemTag::Workspace), all(a, {t * N}, MemTag::Workspace);
    row_max(s.logits.data(), N, V, mx.data());
    tp_.comm->all_gather(mx.span(), all.span());
    for (std::int64_t r = 0; r < N; ++r)
      for (int j = 0; j < t; ++j) mx[r] = std::max(mx[r], all[j * N + r]);
    all.release();
    Tensor sums(a, {2 * N}, MemTag::Workspace);
    exp_shifted_sums(s.logits.data(), targets.data(), N, V, vocab_begin_, spec_.vocab, mx.data(),
                     sums.data());
    tp_.comm->all_reduce(sums.span());
    sum = normalize_rows(s.logits.data(), N, V, sums.data());
  }
  cross_entropy_backward(s.logits.data(), targets.data(), N, V, loss_scale / static_cast<float>(N),
                         vocab_begin_);
  return sum / static_cast<double>(N);
}

BackwardBuffers GptModel::backward_buffers(std::int64_t batch) {
  const std::int64_t S = seq_, N = batch * S, h = spec_.hidden;
  Allocator& a = *alloc_;
  const auto act = MemTag::Activations;
  BackwardBuffers b;
  b.dres = Tensor(a, {rows(batch), h}, act);
  b.d_norm = Tensor(a, {N, h}, act);
  b.d_attn = Tensor(a, {N, attn_width_}, act);
  b.d_qkv = Tensor(a, {N, 3 * attn_width_}, act);
  b.d_act = Tensor(a, {N, ffn_}, act);
  if (spec_.mlp == cost::MlpKind::Swiglu) b.d_up = Tensor(a, {N, up_width_}, act);
  b.scratch = Tensor(a, {S, spec_.seq_len}, MemTag::Workspace);
  if (tp_.split_rows()) {
    b.gathered = Tensor(a, {N, h}, act);
    b.shard = Tensor(a, {rows(batch), h}, act);
  }
  return b;
}

void GptModel::head_backward(const HeadSaved& s, BackwardBuffers& st) {
  const std::int64_t rows = s.x.dim(0), N = batch_of(s.x) * seq_, h = spec_.hidden,
                     V = vocab_;
  const int w_out = w_logits_ >= 0 ? w_logits_ : tok_emb_;
  linear_backward(whole_rows(s.ln, st), p(w_out), s.logits.data(), st.d_norm.data(), g(w_out),
                  nullptr, N, h, V, WeightLayout::OutIn, false);
  st.dres.zero();
  norm_backward(normf_g_, normf_b_, s.x.data(), reduced_rows(st, N), st.dres.data(), rows);
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
  const std::int64_t rows = s.x.dim(0), batch = batch_of(s.x), S = seq_, N = batch * S;
  const std::int64_t h = spec_.hidden, f = ffn_, aw = attn_width_;
  const float drop_p = s.dropout.p;
  // MLP branch: st.dres holds the gradient of the block's output (its rows
  // here; the whole rows gathered under sequence parallelism).
  const float* dy_down = whole_rows(st.dres, st);
  if (spec_.dropout) {  // tp 1 only
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
  linear_backward(whole_rows(s.ln2, st), p(b.w_up), d_up, st.d_norm.data(), g(b.w_up), g(b.b_up),
                  N, h, up_width_, WeightLayout::InOut, false);
  norm_backward(b.norm2_g, b.norm2_b, s.x1.data(), reduced_rows(st, N), st.dres.data(), rows);
  // Attention branch: st.dres now holds the gradient of x1.
  const float* dy_proj = whole_rows(st.dres, st);
  if (spec_.dropout) {
    dropout_apply(st.dres.data(), s.proj_mask.data(), st.d_norm.data(), N * h, drop_p);
    dy_proj = st.d_norm.data();
  }
  linear_backward(s.attn.data(), p(b.w_proj), dy_proj, st.d_attn.data(), g(b.w_proj),
                  g(b.b_proj), N, aw, h, WeightLayout::InOut, false);
  if (cp_.size() > 1) {
    // The keys and values are gathered again (not kept), their gradients
    // summed over the group back to their owners.
    const Tensor kv = gather_kv(s.qkv, batch);
    Tensor dkv(*alloc_, {batch * spec_.seq_len, 2 * aw}, MemTag::Activations);
    attention_backward_cp(s.qkv.data(), kv.data(), positions().data(), s.probs.data(),
                          st.d_attn.data(), st.d_qkv.data(), dkv.data(), st.scratch.data(),
                          {batch, S, spec_.seq_len, heads_, spec_.head_dim()});
    scatter_kv_grads(dkv, st.d_qkv.data(), batch);
  } else {
    const AttentionDims dims{batch, S, heads_, spec_.head_dim()};
    const AttentionDropout ad{s.attn_mask.data(), const_cast<float*>(s.dropped.data()), drop_p};
    attention_backward(s.qkv.data(), s.probs.data(), st.d_attn.data(), st.d_qkv.data(),
                       st.scratch.data(), dims, spec_.dropout ? &ad : nullptr);
  }
  linear_backward(whole_rows(s.ln1, st), p(b.w_qkv), st.d_qkv.data(), st.d_norm.data(),
                  g(b.w_qkv), g(b.b_qkv), N, h, 3 * aw, WeightLayout::InOut, false);
  norm_backward(b.norm1_g, b.norm1_b, s.x.data(), reduced_rows(st, N), st.dres.data(), rows);
}

void GptModel::embedding_backward(const EmbeddingSaved& s, BackwardBuffers& st) {
  const std::int64_t batch = s.tokens.numel() / seq_;
  if (spec_.dropout)
    dropout_apply(st.dres.data(), s.mask.data(), st.dres.data(), st.dres.numel(), s.dropout.p);
  if (tp_.size() == 1 && cp_.size() == 1) {
    cpu::embedding_backward(s.tokens.data(), st.dres.data(), g(tok_emb_), g(pos_emb_), batch,
                            seq_, spec_.hidden);
    return;
  }
  const float* dy = whole_rows(st.dres, st);
  embedding_backward_part(s.tokens.data(), dy, g(tok_emb_), s.tokens.numel(), spec_.hidden,
                          vocab_begin_, vocab_);
  if (pos_emb_ >= 0)
    add_position_grads(dy, g(pos_emb_), s.tokens.numel(), 0, seq_, spec_.hidden,
                       positions().data());
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
