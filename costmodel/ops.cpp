#include "costmodel/ops.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <utility>

#include "sim/error.hpp"
#include "sim/limits.hpp"

namespace strata::cost {

std::int64_t Layer::params() const {
  std::int64_t n = 0;
  for (const auto& op : ops) n += op.params;
  return n;
}
std::int64_t Layer::gemm_weight_params() const {
  std::int64_t n = 0;
  for (const auto& op : ops)
    if (op.kind == OpKind::Linear && !op.unquantized) n += op.matrix_params();
  return n;
}
Flops Layer::fwd_flops() const {
  Flops f = 0;
  for (const auto& op : ops) f += op.fwd_flops;
  return f;
}
Flops Layer::bwd_flops() const {
  Flops f = 0;
  for (const auto& op : ops) f += op.bwd_flops;
  return f;
}
Bytes Layer::saved_bytes() const { return saved_bytes(Recompute::None); }

Bytes Layer::saved_bytes(Recompute policy) const {
  switch (policy) {
    case Recompute::None:
    case Recompute::Selective: {
      Bytes b = 0;
      for (const auto& op : ops)
        b += op.saved_bytes - (policy == Recompute::Selective ? op.core_saved_bytes : 0);
      return b;
    }
    case Recompute::SelectiveOp: {
      Bytes b = input_bytes;
      for (const auto& op : ops) b += op.sac_stored_bytes;
      return b;
    }
    case Recompute::Full:
      return input_bytes;
    default:
      throw Error("saved_bytes: recompute policy '" + std::string(enum_name(policy)) +
                  "' is a schedule over layers, not a per-layer rule");
  }
}

std::vector<Bytes> Layer::saved_tensors(Recompute policy) const {
  std::vector<Bytes> out;
  auto add = [&](Bytes b) {
    if (b > 0) out.push_back(b);
  };
  switch (policy) {
    case Recompute::None:
    case Recompute::Selective:
      for (const auto& op : ops) add(op.saved_bytes - (policy == Recompute::Selective ? op.core_saved_bytes : 0));
      break;
    case Recompute::SelectiveOp:
      add(input_bytes);
      for (const auto& op : ops) add(op.sac_stored_bytes);
      break;
    default:
      add(saved_bytes(policy));
  }
  return out;
}

double rerun_share(const Op& op, Recompute selective_policy) {
  switch (selective_policy) {
    case Recompute::Selective: return op.selective_rerun;
    case Recompute::SelectiveOp: return op.sac_rerun;
    default: return 0.0;
  }
}

Bytes Layer::max_grad_bytes() const {
  Bytes g = 0;
  for (const auto& op : ops) g = std::max(g, op.grad_bytes);
  return g;
}

std::int64_t LayerChain::params() const {
  std::int64_t n = 0;
  for (const auto& l : layers) n += l.params;
  return n;
}
Flops LayerChain::fwd_flops() const {
  Flops f = 0;
  for (const auto& l : layers) f += l.fwd_flops;
  return f;
}
Flops LayerChain::bwd_flops() const {
  Flops f = 0;
  for (const auto& l : layers) f += l.bwd_flops;
  return f;
}

std::vector<std::int64_t> OpChain::kind_counts(std::span<const std::int64_t> layers) const {
  std::vector<std::int64_t> n(kinds.size(), 0);
  for (const std::int64_t l : layers) ++n[static_cast<std::size_t>(kind_of[static_cast<std::size_t>(l)])];
  return n;
}

std::vector<std::int64_t> OpChain::kind_counts(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> n(kinds.size(), 0);
  for (std::int64_t l = first; l < first + count; ++l) ++n[static_cast<std::size_t>(kind_of[static_cast<std::size_t>(l)])];
  return n;
}

std::int64_t OpChain::params() const {
  std::int64_t n = embedding.params() + head.params();
  for (const std::int32_t k : kind_of) n += kinds[static_cast<std::size_t>(k)].params();
  return n;
}
Flops OpChain::fwd_flops() const {
  Flops f = embedding.fwd_flops() + head.fwd_flops();
  for (const std::int32_t k : kind_of) f += kinds[static_cast<std::size_t>(k)].fwd_flops();
  return f;
}
Flops OpChain::bwd_flops() const {
  Flops f = embedding.bwd_flops() + head.bwd_flops();
  for (const std::int32_t k : kind_of) f += kinds[static_cast<std::size_t>(k)].bwd_flops();
  return f;
}

namespace {

// How a linear layer's weight is laid out over the tensor-parallel group:
// output features split (column), input features split (row), or whole on
// every rank (replicated: MLA's down projections, as Megatron-Core keeps them).
enum class Split { Column, Row, Replicated };

// Builds ops with the shape bookkeeping shared by every op of a layer.
struct Builder {
  const ModelSpec& m;
  const ExpandOptions& o;
  double b, s, s_full, h, t, kvh, f, a, V;
  // Per token: query, key and value features, and the attention output's.
  double qw, kw, vw, ow;
  Bytes e;

  Builder(const ModelSpec& model, const ExpandOptions& opts)
      : m(model),
        o(opts),
        b(static_cast<double>(opts.micro_batch)),
        s(static_cast<double>(model.seq_len / opts.cp)),
        s_full(static_cast<double>(model.seq_len)),
        h(static_cast<double>(model.hidden)),
        t(static_cast<double>(opts.tp)),
        kvh(static_cast<double>(model.kv_hidden())),
        f(static_cast<double>(model.ffn_hidden)),
        a(static_cast<double>(model.heads)),
        V(static_cast<double>(model.vocab)),
        qw(static_cast<double>(model.q_hidden())),
        kw(model.mla ? qw : kvh),
        vw(model.mla ? static_cast<double>(model.heads * model.mla->v_head_dim) : kvh),
        ow(static_cast<double>(model.attn_out_hidden())),
        e(activation_bytes(opts.precision)) {}

  // Elements of a tensor outside the tensor-parallel region: replicated on
  // every tp rank unless sequence parallelism splits it.
  double rep(double elems) const { return o.sequence_parallel ? elems / t : elems; }
  // Elements of a tensor inside the tensor-parallel region.
  double shard(double elems) const { return elems / t; }
  static Bytes bytes(double elems, Bytes per) {
    return static_cast<Bytes>(elems * static_cast<double>(per) + 0.5);
  }

  // A linear layer of `in` → `out` features, laid out per `split`. `in_rep`:
  // its input lies in the replicated region (saved per rep()). `tokens`
  // multiplies the tokens it processes (MoE top-k), `copies` its weights
  // (MoE experts).
  Op linear(std::string_view name, double in, double out, Split split, bool in_rep, bool bias,
            double tokens = 1.0, double copies = 1.0) const {
    Op op;
    op.name = name;
    op.kind = OpKind::Linear;
    const bool column = split == Split::Column;
    // A replicated weight runs whole on every rank, over the rank's tokens
    // (a sequence-parallel rank's share).
    const double div = split == Split::Replicated ? (o.sequence_parallel ? t : 1.0) : t;
    const double w = split == Split::Replicated ? in * out : in * out / t;
    // Column-parallel bias is split; row-parallel and replicated biases are whole.
    const double bias_n = bias ? (column ? out / t : out) : 0.0;
    op.params = static_cast<std::int64_t>(copies * (w + bias_n));
    op.matrices = static_cast<std::int64_t>(copies);
    op.rows = static_cast<std::int64_t>(split == Split::Row ? in / t : in);
    op.cols = static_cast<std::int64_t>(column ? out / t : out);
    op.fwd_flops = tokens * 2.0 * b * s * in * out / div;
    op.bwd_flops = 2.0 * op.fwd_flops;
    const double in_elems = b * s * in;
    const double saved = tokens * (in_rep ? rep(in_elems) : shard(in_elems));
    // What the weight gradient keeps: the sequence shard (gathered again in
    // the backward) or, without that re-gather, the all-gathered input of a
    // dense column-parallel linear itself (autograd retains the tensor the
    // GEMM read).
    const bool gathered = in_rep && column && tokens == 1.0 && copies == 1.0 && o.sequence_parallel &&
                          !o.sp_regather_input;
    const double kept = gathered ? in_elems : saved;
    // FP8 and FP4 keep the input's column-wise copy for the weight gradient
    // (Transformer Engine's Linear discards the row-wise one after the
    // forward GEMM), with the recipe's scales; torchao's rowwise keeps the
    // 16-bit input and casts it again in the backward.
    op.saved_bytes = bytes(kept, e);
    if (quantized_gemms(o.precision) && !(o.precision == Precision::FP8 && o.fp8_recipe == Fp8Recipe::Rowwise)) {
      const GemmQuantization q = gemm_quantization(o.precision, o.fp8_recipe, false);  // one copy kept
      op.saved_bytes = bytes(kept * q.elem_bytes, 1) + bytes(kept * q.scale_bytes, 1);
    }
    const double out_elems = tokens * b * s * (column ? out / t : out);
    op.gemm_in_elems = saved;
    op.gemm_out_elems = out_elems;
    op.fwd_bytes = bytes(copies * w, e) + bytes(saved, e) + bytes(out_elems, e);
    op.grad_bytes = bytes(out_elems, e);
    op.bwd_bytes = 2 * op.fwd_bytes;
    return op;
  }

  // An op without weights producing `out_elems` from `touched_elems` of
  // traffic; `core`: all it saves is attention core.
  Op elementwise(std::string_view name, OpKind kind, double saved_elems, Bytes per_elem,
                 double touched_elems, double out_elems, bool core = false) const {
    Op op;
    op.name = name;
    op.kind = kind;
    op.saved_bytes = bytes(saved_elems, per_elem);
    op.core_saved_bytes = core ? op.saved_bytes : 0;
    op.grad_bytes = bytes(out_elems, e);
    op.fwd_bytes = bytes(2.0 * touched_elems, e);
    op.bwd_bytes = 2 * op.fwd_bytes;
    return op;
  }

  // Eager composites (ExpandOptions::fused_elementwise false) move their
  // tensor several times. Backward is charged twice the forward's bytes and
  // kernels, as every op here is.
  void eager(Op& op, double elems, double bytes_per_elem, std::int64_t kernels) const {
    op.fwd_bytes = static_cast<Bytes>(elems * bytes_per_elem + 0.5);
    op.bwd_bytes = 2 * op.fwd_bytes;
    op.fwd_kernels = kernels;
    op.bwd_kernels = 2 * kernels;
  }
  // The fp32 round trip of the reference modules (x.float() … .type_as(x)):
  // bytes per element (read e, write 4; read 4, write e) and kernels; none
  // when activations are fp32 already.
  double cast_bytes() const { return e == 4 ? 0.0 : 2.0 * (static_cast<double>(e) + 4.0); }
  std::int64_t cast_kernels() const { return e == 4 ? 0 : 2; }

  // A norm over `width` features per token of a replicated-region tensor
  // (the hidden state unless given); it saves its input.
  Op norm(std::string_view name, double width = 0) const {
    if (width == 0) width = h;
    const double elems = rep(b * s * width);
    Op op = elementwise(name, OpKind::Norm, elems, e, elems, elems);
    op.params = static_cast<std::int64_t>(m.norm == NormKind::LayerNorm ? 2 * width : width);
    if (!o.fused_elementwise && m.norm == NormKind::RmsNorm) {
      // The reference RMSNorm (torchtitan models/norms.py RMSNorm, Hugging
      // Face LlamaRMSNorm, Megatron-LM legacy/model/rms_norm.py): the cast
      // pair, pow(2) (read and write fp32: 8), mean(-1) (read: 4), + eps
      // and rsqrt over one value per token, x * rsqrt (8), * weight (2e):
      // 36 bytes per element and 8 kernels in bf16, against 4 bytes and one
      // kernel fused. LayerNorm is one native kernel either way
      // (aten::native_layer_norm).
      eager(op, elems, cast_bytes() + 8 + 4 + 8 + 2.0 * static_cast<double>(e),
            cast_kernels() + 6);
    }
    return op;
  }

  // Rotary position embedding on the queries and keys (q_elems, k_elems on
  // this rank): nothing saved (its backward needs only the rotation), one
  // kernel per tensor fused (Megatron-Core's fused_apply_rotary_pos_emb,
  // reads and writes each once). Eager, torchtitan's apply_rotary_emb
  // (models/llama/model.py): x.float(), the complex product with freqs_cis
  // (read and write fp32: 8), .type_as(x): 20 bytes per element and 3
  // kernels per tensor in bf16.
  Op rotary(double q_elems, double k_elems) const {
    const double elems = q_elems + k_elems;
    Op op = elementwise("rope", OpKind::Rotary, 0.0, e, elems, elems);
    op.fwd_kernels = 2;
    op.bwd_kernels = 2;
    if (!o.fused_elementwise) eager(op, elems, cast_bytes() + 8, 2 * (cast_kernels() + 1));
    return op;
  }

  Op dropout_mask(std::string_view name, double elems, bool core = false) const {
    return elementwise(name, OpKind::Dropout, elems, 1, elems, elems, core);
  }

  // Queries and keys normalised before attention: saves its input, the
  // projected Q and K (split by tp with the heads).
  Op qk_norm() const {
    const double elems = shard(b * s * (qw + kw));
    Op op = elementwise("qk_norm", OpKind::Norm, elems, e, elems, elems);
    const double hd = static_cast<double>(m.head_dim());
    const double width = m.qk_norm == QkNorm::Head ? 2 * hd : (qw + kw) / t;
    op.params = static_cast<std::int64_t>(m.norm == NormKind::LayerNorm ? 2 * width : width);
    return op;
  }

  // Multi-head latent attention's projections (DeepSeek-V2 Sec. 2.1): the
  // query from the input or from its own latent, the keys' and values'
  // latent with the shared rotary key, each latent normalised, then
  // expanded per head.
  void mla_projections(std::vector<Op>& ops) const {
    const MlaSpec& l = *m.mla;
    const double H = a, kvl = static_cast<double>(l.kv_lora_rank),
                 rope = static_cast<double>(l.qk_rope_head_dim),
                 nope = static_cast<double>(l.qk_nope_head_dim),
                 v = static_cast<double>(l.v_head_dim);
    const bool qkv_bias = m.has_qkv_bias();
    if (l.q_lora_rank) {
      const double ql = static_cast<double>(*l.q_lora_rank);
      ops.push_back(linear("q_down", h, ql, Split::Replicated, /*in_rep=*/true, qkv_bias));
      ops.push_back(norm("q_down_norm", ql));
      ops.push_back(linear("q_up", ql, qw, Split::Column, /*in_rep=*/true, false));
    } else {
      ops.push_back(linear("q", h, qw, Split::Column, /*in_rep=*/true, qkv_bias));
    }
    // Reads the same input as the query's projection, saved there.
    Op down = linear("kv_down", h, kvl + rope, Split::Replicated, /*in_rep=*/true, qkv_bias);
    down.saved_bytes = 0;
    ops.push_back(down);
    ops.push_back(norm("kv_down_norm", kvl));
    ops.push_back(linear("kv_up", kvl, H * (nope + v), Split::Column, /*in_rep=*/true, false));
  }

  // Keys each query of a windowed layer attends to, in the convention
  // attention() prices full causal attention by (every query against all
  // S = s_full keys). A causal query at position p (0-based) attends to
  // p + 1 keys: S(S + 1)/2 pairs over the sequence, priced as S·S, so a pair
  // counts 2S/(S + 1). With a window of w <= S keys (AttentionWindow in
  // model.hpp) query p attends to min(p + 1, w): the first w queries
  // 1 … w keys, w(w + 1)/2 pairs, the other S − w queries w each, so
  // wS − w(w − 1)/2 pairs in all (a mean of w − w(w − 1)/(2S) keys a query,
  // against (S + 1)/2 for full causal attention). Priced alike, per query:
  //   (wS − w(w − 1)/2) · 2S/(S + 1) / S = w(2S − w + 1)/(S + 1),
  // which is S at w = S; a window of S keys or more covers the sequence and
  // is full attention, returned as S exactly (bit-for-bit the full op).
  // Example: S = 8, w = 3: 1+2+3+3+3+3+3+3 = 21 of 36 causal pairs, so
  // 8·21/36 = 3·14/9 keys a query. Under context parallelism each rank's s
  // queries count this mean (its load-balanced chunks' average).
  double window_keys() const {
    const double w = static_cast<double>(m.window_size());
    if (w >= s_full) return s_full;
    return w * (2.0 * s_full - w + 1.0) / (s_full + 1.0);
  }

  // `windowed`: the layer has sliding-window attention (window_keys()).
  void attention(std::vector<Op>& ops, bool windowed) const {
    const double q = b * s * qw, k = b * s * kw, v = b * s * vw, out = b * s * ow;
    // Scores cost 2·b·s·s_full per query feature (heads · query-key head
    // dim) and values 2·b·s·s_full per output feature (heads · value head
    // dim), each local query against all keys of the sequence (s = s_full
    // without context parallelism): 2·b·s·s_full·h each when head_dim is
    // hidden / heads. Grouped keys and values serve several query heads.
    // A windowed layer under flash attention (FlashAttention's window_size,
    // which skips the blocks outside the window) prices window_keys() keys
    // a query instead of s_full; its saved bytes (Q, K, V and the
    // log-sum-exp) and traffic do not change. Standard attention keeps full
    // attention's FLOPs and bytes: the eager kernel computes the whole
    // s × s_full product and masks it (Hugging Face's eager_attention_forward
    // adds the sliding-window mask to the full score matrix).
    const double keys = windowed && fused_attention(o.attention) ? window_keys() : s_full;
    const double score_flops = 2.0 * b * s * keys * qw / t;
    const double value_flops = 2.0 * b * s * keys * ow / t;
    if (fused_attention(o.attention)) {
      Op op;
      op.name = "attention";
      op.kind = OpKind::Attention;
      op.cudnn = o.attention == AttentionKernel::Cudnn;
      op.fwd_flops = score_flops + value_flops;
      op.bwd_flops = 2.0 * op.fwd_flops;
      // Saves Q, K, V (its inputs) and fp32 log-sum-exp per head and query;
      // its output is saved as the projection's input.
      op.saved_bytes = bytes(shard(q + k + v), e) + bytes(shard(a * b * s), 4);
      // On torchtitan's save list: its output and log-sum-exp are stored.
      op.sac_stored_bytes = bytes(shard(out), e) + bytes(shard(a * b * s), 4);
      op.sac_rerun = 0;
      op.fwd_bytes = bytes(shard(q + k + v + out), e);
      op.grad_bytes = bytes(shard(out), e);
      op.bwd_bytes = 2 * op.fwd_bytes;
      ops.push_back(op);
      return;
    }
    const double scores = a * b * s * s_full;  // elements of the score matrix
    // Traffic set below, as a GEMM moves it.
    Op qk = elementwise("attn_scores", OpKind::AttnScores, shard(q + k), e, 0, shard(scores));
    qk.fwd_flops = score_flops;
    qk.bwd_flops = 2.0 * score_flops;
    // A batched GEMM moves each of its operands once: forward reads Q and
    // K and writes the scores; backward's two GEMMs read the scores'
    // gradient each, dQ = dS·K reading K and writing dQ, dK = dSᵀ·Q reading
    // Q and writing dK.
    qk.fwd_bytes = bytes(shard(q + k + scores), e);
    qk.bwd_bytes = bytes(shard(2.0 * (scores + q + k)), e);
    ops.push_back(qk);
    // Soft-capped scores (Gemma 2's eager attention): under flash
    // attention the kernel caps them itself (FlashAttention's softcap
    // argument, from release 2.6), priced as the uncapped kernel.
    if (m.attn_softcap) ops.push_back(softcap("attn_softcap", shard(scores), true));
    Op softmax = elementwise("softmax", OpKind::Softmax, shard(scores), e, shard(scores), shard(scores), true);
    if (!o.fused_elementwise) {
      // Eager, as the 2019 Megatron-LM ran it (mpu/transformer.py
      // GPT2ParallelSelfAttention): the scores divided by sqrt(head dim),
      // masked by a product and a difference with the causal mask, then
      // softmax: four kernels, each reading and writing the score matrix.
      // Backward: softmax's (reads the gradient and the output, writes the
      // input gradient), the product's and the division's (one read and
      // one write each); the difference with a constant passes its
      // gradient through. Fused (one scale-mask-softmax kernel): one
      // kernel and one read and write forward.
      const double n = shard(scores);
      softmax.fwd_bytes = bytes(8.0 * n, e);
      softmax.bwd_bytes = bytes(7.0 * n, e);
      softmax.fwd_kernels = 4;
      softmax.bwd_kernels = 3;
    }
    ops.push_back(softmax);
    if (m.dropout) ops.push_back(dropout_mask("attn_dropout", shard(scores), true));
    // Values: saves V, and the dropout output when dropout made a new tensor
    // (otherwise its input is the softmax output, already saved).
    Op av = elementwise("attn_values", OpKind::AttnValues, shard(v), e, 0, shard(out));  // traffic below
    if (m.dropout) {
      av.core_saved_bytes = bytes(shard(scores), e);
      av.saved_bytes += av.core_saved_bytes;
    }
    av.fwd_flops = value_flops;
    av.bwd_flops = 2.0 * value_flops;
    // Forward reads the probabilities and V and writes the output;
    // backward's dP = dO·Vᵀ reads dO and V and writes dP, dV = Pᵀ·dO reads
    // P and dO and writes dV.
    av.fwd_bytes = bytes(shard(scores + v + out), e);
    av.bwd_bytes = bytes(shard(2.0 * (scores + out + v)), e);
    ops.push_back(av);
  }

  // A gated (SwiGLU, GeGLU) or plain GeLU MLP of width `width`, visited by
  // `tokens` times the tokens, with `copies` weight sets on this rank.
  void mlp_of(std::vector<Op>& ops, std::string_view up_name, std::string_view act_name,
              std::string_view down_name, double width, double tokens, double copies,
              bool expert) const {
    const bool gated = m.mlp != MlpKind::Gelu;
    ops.push_back(linear(up_name, h, gated ? 2 * width : width, Split::Column, /*in_rep=*/true,
                         m.bias, tokens, copies));
    ops.back().expert = expert;
    if (gated) ops.back().products = {0.5, 0.5, 0.0};  // w1 (gate), then w3 (up)
    // GeLU saves its input; a gated unit saves gate and up projections.
    const double act_saved = tokens * shard(b * s * width) * (gated ? 2.0 : 1.0);
    const double act_out = tokens * shard(b * s * width);
    ops.push_back(elementwise(act_name, OpKind::Activation, act_saved, e, act_saved, act_out));
    // Eager, a gated unit is the activation of the gate and its product with
    // the up projection (torchtitan's FeedForward: silu(w1(x)) * w3(x)):
    // read and write e, read 2e and write e per output element, 2 kernels.
    if (gated && !o.fused_elementwise) eager(ops.back(), act_out, 5.0 * static_cast<double>(e), 2);
    ops.push_back(linear(down_name, width, h, Split::Row, /*in_rep=*/false, m.bias, tokens, copies));
    ops.back().expert = expert;
  }

  static std::string_view up_name(MlpKind k) { return k == MlpKind::Gelu ? "mlp_up" : "mlp_up_gate"; }
  static std::string_view act_name(MlpKind k) {
    return k == MlpKind::Gelu ? "gelu" : k == MlpKind::Swiglu ? "swiglu" : "geglu";
  }

  void mlp(std::vector<Op>& ops, bool moe_block) const {
    if (!moe_block) {
      mlp_of(ops, up_name(m.mlp), act_name(m.mlp), "mlp_down", f, 1.0, 1.0, false);
      return;
    }
    const MoeSpec& x = *m.moe;
    const double experts = static_cast<double>(x.experts);
    const double top_k = static_cast<double>(x.top_k);
    // Expert parallelism spreads the experts; tokens still visit top_k each.
    const double local_experts = experts / static_cast<double>(o.ep);
    // The gate is replicated (not split by tp) and keeps fp32 routing
    // probabilities; its input is the experts' input, saved there.
    Op router;
    router.name = "router";
    router.kind = OpKind::Router;
    router.params = static_cast<std::int64_t>(h * experts);
    router.matrices = 1;
    router.rows = m.hidden;
    router.cols = x.experts;
    router.fwd_flops = 2.0 * b * s * h * experts;
    router.bwd_flops = 2.0 * router.fwd_flops;
    router.saved_bytes = bytes(b * s * experts, 4);
    router.fwd_bytes = bytes(router.params, e) + bytes(b * s * (h + experts), e);
    router.bwd_bytes = 2 * router.fwd_bytes;
    router.grad_bytes = bytes(b * s * experts, 4);
    ops.push_back(router);
    // Each token visits top_k experts; the weights exist once per expert.
    // The busiest rank computes and keeps expert_load times its share.
    mlp_of(ops, up_name(m.mlp), act_name(m.mlp), "mlp_down",
           static_cast<double>(m.expert_ffn()), top_k * o.expert_load, local_experts, true);
    if (x.shared_experts > 0) {
      // Shared experts: a dense MLP per expert that every token visits,
      // split by tp like a dense MLP and not spread by ep.
      const double shared = static_cast<double>(x.shared_experts);
      mlp_of(ops, m.mlp == MlpKind::Gelu ? "shared_up" : "shared_up_gate", "shared_act",
             "shared_down", static_cast<double>(m.shared_ffn()), shared, shared, false);
      if (x.shared_gate) {
        // h → 1 sigmoid gate on the shared output (its input saved above).
        Op gate = linear("shared_gate", h, 1, Split::Replicated, /*in_rep=*/true, false);
        gate.saved_bytes = 0;
        ops.push_back(gate);
      }
    }
  }

  Layer embedding() const {
    Layer l;
    l.name = "embedding";
    l.kind = LayerKind::Embedding;
    l.ops.reserve(3);
    Op op;
    op.name = "embedding";
    op.kind = OpKind::Embedding;
    // Vocabulary-parallel table.
    op.params = static_cast<std::int64_t>(V * h / t);
    op.matrices = 1;
    op.rows = static_cast<std::int64_t>(V / t);
    op.cols = m.hidden;
    op.saved_bytes = bytes(b * s, 4);  // token ids
    op.fwd_bytes = bytes(2.0 * b * s * h, e);
    op.bwd_bytes = 2 * op.fwd_bytes;
    l.ops.push_back(op);
    if (m.position_embedding == PositionEmbedding::Learned) {
      Op pos;
      pos.name = "position_embedding";
      pos.kind = OpKind::Embedding;
      const double rows = static_cast<double>(m.position_rows());
      pos.params = static_cast<std::int64_t>(rows * h);  // replicated
      pos.matrices = 1;
      pos.rows = m.position_rows();
      pos.cols = m.hidden;
      pos.fwd_bytes = bytes(2.0 * b * s * h, e);
      pos.bwd_bytes = 2 * pos.fwd_bytes;
      l.ops.push_back(pos);
    }
    if (m.dropout) l.ops.push_back(dropout_mask("embedding_dropout", rep(b * s * h)));
    return l;
  }

  // A transformer block; `moe_block`: its MLP is the routed experts;
  // `windowed`: its attention is the model's sliding window.
  Layer block(bool moe_block, bool windowed) const {
    Layer l;
    l.name = "block";
    l.kind = LayerKind::Block;
    l.ops.reserve(24);
    l.input_bytes = bytes(rep(b * s * h), e);
    auto& ops = l.ops;
    const bool pre = m.norm_placement != NormPlacement::Post;
    const bool post = m.norm_placement != NormPlacement::Pre;
    const bool parallel = m.block != BlockKind::Sequential;
    Sites at;
    if (pre) {
      at.attn_norm = static_cast<int>(ops.size());
      ops.push_back(norm("attn_norm"));
    }
    if (m.mla) {
      const int first = static_cast<int>(ops.size());
      mla_projections(ops);
      // The query's projection (q_up, or q without a query rank) and kv_up.
      at.up_proj = {first + (m.mla->q_lora_rank ? 2 : 0), static_cast<int>(ops.size()) - 1};
    } else {
      ops.push_back(linear("qkv", h, qw + 2 * kvh, Split::Column, /*in_rep=*/true, m.has_qkv_bias()));
      ops.back().products = {qw / (qw + 2 * kvh), kvh / (qw + 2 * kvh), kvh / (qw + 2 * kvh)};
    }
    if (m.qk_norm != QkNorm::None) ops.push_back(qk_norm());
    if (m.position_embedding == PositionEmbedding::Rope) {
      at.rope = static_cast<int>(ops.size());
      if (m.mla) {
        // Only the decoupled rotary dims: per head of the query, and the one
        // key shared by every head (from the replicated down projection).
        const double rope = static_cast<double>(m.mla->qk_rope_head_dim);
        ops.push_back(rotary(shard(b * s * a * rope), rep(b * s * rope)));
      } else {
        ops.push_back(rotary(shard(b * s * qw), shard(b * s * kvh)));
      }
    }
    at.attention = {static_cast<int>(ops.size()), 0};
    attention(ops, windowed);
    at.attention.second = static_cast<int>(ops.size());
    ops.push_back(linear("attn_proj", ow, h, Split::Row, /*in_rep=*/false, m.bias));
    if (post) ops.push_back(norm("attn_post_norm"));
    if (m.dropout) ops.push_back(dropout_mask("attn_out_dropout", rep(b * s * h)));
    if (!parallel)
      ops.push_back(elementwise("attn_residual", OpKind::Residual, 0.0, e, rep(b * s * h), rep(b * s * h)));
    if (pre && m.block != BlockKind::Parallel) {
      at.mlp_norm = static_cast<int>(ops.size());
      ops.push_back(norm("mlp_norm"));
      // A parallel block's second norm reads the block's input, which the
      // first one saved.
      if (parallel) ops.back().saved_bytes = 0;
    }
    const std::size_t mlp_first = ops.size();
    mlp(ops, moe_block);
    // With one shared norm, a dense MLP reads the normalised input the QKV
    // projection saved.
    if (m.block == BlockKind::Parallel && !moe_block) ops[mlp_first].saved_bytes = 0;
    const int mlp0 = static_cast<int>(mlp_first);
    if (moe_block) {
      // router, the experts' up, activation and down, the shared experts' up.
      at.expert_act = mlp0 + 2;
      at.expert_down = mlp0 + 3;
      if (m.moe->shared_experts > 0) at.mlp_norm_consumer = mlp0 + 4;
    } else {
      at.mlp_norm_consumer = mlp0;
      // The dense MLP: up-projection, activation, down-projection.
      at.dense_mlp = mlp0;
    }
    if (post) ops.push_back(norm("mlp_post_norm"));
    if (m.dropout) ops.push_back(dropout_mask("mlp_dropout", rep(b * s * h)));
    ops.push_back(elementwise(parallel ? "residual" : "mlp_residual", OpKind::Residual, 0.0, e,
                              rep(b * s * h), rep(b * s * h)));
    save_list(ops);
    selective_modules(ops, at);
    return l;
  }

  // Where a block's ops sit, for the selective recompute modules: -1 none.
  struct Sites {
    int attn_norm = -1, mlp_norm = -1;
    int mlp_norm_consumer = -1;          // the op keeping the MLP norm's output
    std::pair<int, int> up_proj{-1, -1};  // MLA's query and key-value up-projections
    int rope = -1;
    std::pair<int, int> attention{0, 0};  // [first, last) of the attention's ops
    int expert_act = -1, expert_down = -1;
    int dense_mlp = -1;  // a dense block's MLP: its first of three ops
  };

  // What Recompute::Selective drops and reruns under o.recompute_modules
  // (Megatron-Core, transformer_config.py recompute_modules; DeepSeek-V3
  // Sec. 3.2.3 recomputes RMSNorm and MLA's up-projections): core_attn the
  // attention core (its ops' core bytes, rerun from Q, K and V); layernorm
  // the outputs of the block's two pre-norms, kept by the ops after them
  // (attn_norm's by the first projection, mlp_norm's by the dense MLP's or
  // the shared experts' up-projection), rerun from the norms' saved inputs;
  // mla_up_proj the query and key-value up-projections and RoPE, whose
  // outputs are the attention's saved Q, K and V; moe_act the routed
  // experts' activation, whose output their down-projection keeps; mlp a
  // dense MLP from its input.
  void selective_modules(std::vector<Op>& ops, const Sites& at) const {
    const RecomputeModules mods = o.recompute_modules;
    auto drop = [&](int i, Bytes b) {
      if (i < 0) return;
      Op& op = ops[static_cast<std::size_t>(i)];
      op.core_saved_bytes = std::min(op.saved_bytes, op.core_saved_bytes + b);
    };
    auto rerun = [&](int i) {
      if (i >= 0) ops[static_cast<std::size_t>(i)].selective_rerun = 1.0;
    };
    for (int i = at.attention.first; i < at.attention.second; ++i) {
      Op& op = ops[static_cast<std::size_t>(i)];
      // (An activation between the scores and the softmax is their soft-capping.)
      const bool core = op.kind == OpKind::AttnScores || op.kind == OpKind::Softmax ||
                        op.kind == OpKind::AttnValues || op.kind == OpKind::Activation ||
                        (op.kind == OpKind::Dropout && op.core_saved_bytes > 0);
      if (!has_module(mods, RecomputeModule::CoreAttn)) op.core_saved_bytes = 0;
      else if (core) op.selective_rerun = 1.0;
    }
    if (has_module(mods, RecomputeModule::MlaUpProj) && m.mla) {
      rerun(at.up_proj.first);
      rerun(at.up_proj.second);
      rerun(at.rope);
      const double q = b * s * qw, k = b * s * kw, v = b * s * vw;
      for (int i = at.attention.first; i < at.attention.second; ++i) {
        const Op& op = ops[static_cast<std::size_t>(i)];
        if (op.kind == OpKind::Attention) drop(i, bytes(shard(q + k + v), e));
        if (op.kind == OpKind::AttnScores) drop(i, op.saved_bytes);
        if (op.kind == OpKind::AttnValues) drop(i, bytes(shard(v), e));
      }
    }
    if (has_module(mods, RecomputeModule::Layernorm)) {
      for (const int norm_at : {at.attn_norm, at.mlp_norm}) rerun(norm_at);
      if (at.attn_norm >= 0) drop(at.attn_norm + 1, ops[static_cast<std::size_t>(at.attn_norm) + 1].saved_bytes);
      if (at.mlp_norm >= 0 && at.mlp_norm_consumer >= 0)
        drop(at.mlp_norm_consumer, ops[static_cast<std::size_t>(at.mlp_norm_consumer)].saved_bytes);
    }
    if (has_module(mods, RecomputeModule::MoeAct) && at.expert_act >= 0) {
      rerun(at.expert_act);
      drop(at.expert_down, ops[static_cast<std::size_t>(at.expert_down)].saved_bytes);
    }
    // mlp: a dense MLP checkpointed from its input (Megatron-Core's
    // recompute_mlp, not for MoE layers): the activation's and the
    // down-projection's saved inputs dropped, the three ops rerun; the
    // up-projection's input is what the checkpoint keeps.
    if (has_module(mods, RecomputeModule::Mlp) && at.dense_mlp >= 0) {
      for (int i = at.dense_mlp; i < at.dense_mlp + 3; ++i) rerun(i);
      for (int i = at.dense_mlp + 1; i < at.dense_mlp + 3; ++i) drop(i, ops[static_cast<std::size_t>(i)].saved_bytes);
    }
  }

  // torchtitan's op-level selective checkpointing (torchtitan
  // models/llama3/infra/parallelize.py, _apply_ac_to_transformer_block,
  // selective_ac_option "op"; distributed/activation_checkpoint.py later):
  // within one block, outputs of ops on _save_list are stored (MUST_SAVE)
  // and all else is rerun (PREFER_RECOMPUTE), except that every second
  // aten.mm is rerun too (the block's mm count, from 1, even). The attention
  // kernel is on the list (set in attention()). aten.mm is what a Linear
  // without bias runs; with a bias it is aten.addmm, and MoE experts run
  // grouped products: neither is on the list nor counted. The products run
  // in module order (wq, wk, wv, wo; w1, w3, w2), so a Llama block stores
  // wq, wv, w1 and w2 and reruns wk, wo and w3.
  static void save_list(std::vector<Op>& ops) {
    std::int64_t mm = 0;
    for (Op& op : ops) {
      const bool plain_mm = (op.kind == OpKind::Linear || op.kind == OpKind::Router) && !op.expert &&
                            op.matrices > 0 && op.vector_params() == 0;
      if (!plain_mm) continue;
      std::array<double, 3> parts = op.products;
      if (parts[0] == 0) parts = {1.0, 0.0, 0.0};
      op.sac_rerun = 0;
      double stored = 0;
      for (const double share : parts) {
        if (share == 0) continue;
        if (++mm % 2 == 0) op.sac_rerun += share;
        else stored += share;
      }
      op.sac_stored_bytes = bytes(static_cast<double>(op.grad_bytes) * stored, 1);
    }
  }

  // The output layer's logits, and the cross-entropy over them, named
  // `logits` and `loss` (the main head's, or a prediction module's).
  // `shared`: the weights are another op's (a prediction module's output
  // head is the main model's), so this one holds none.
  Op logits_op(std::string_view name, bool shared) const {
    Op logits = linear(name, h, V, Split::Column, /*in_rep=*/true, m.bias);
    const bool owns = !shared && !m.tied_embeddings;
    logits.params = owns ? static_cast<std::int64_t>(V * h / t) : 0;
    logits.matrices = owns ? 1 : 0;
    logits.rows = static_cast<std::int64_t>(V / t);
    logits.cols = m.hidden;
    return logits;
  }

  // Soft-capping of `elems` scores or logits, cap · tanh(x / cap), as
  // transformers' Gemma 2 runs it: a division, tanh and a product, three
  // kernels of one read and one write each (one fused kernel with fused
  // elementwise ops); the tanh's output is kept for backward, in the
  // activation type. `core`: part of the attention core (Recompute::
  // Selective drops and reruns it with the softmax).
  Op softcap(std::string_view name, double elems, bool core) const {
    Op op = elementwise(name, OpKind::Activation, elems, e, elems, elems, core);
    if (!o.fused_elementwise) eager(op, elems, 6.0 * static_cast<double>(e), 3);
    return op;
  }

  Op loss_op(std::string_view name, CrossEntropy kind) const {
    const double n = shard(b * s * V);
    // The in-place and unfused forms run on the logits cast to fp32 and
    // cast the gradient back (neither cast in fp32 training). Bytes: each
    // kernel reads and writes its tensor once.
    const double cast = e == 4 ? 0.0 : static_cast<double>(e) + 4.0;
    const std::int64_t casts = e == 4 ? 0 : 1;
    Op loss;
    switch (kind) {
      case CrossEntropy::InPlace:
        // Megatron-LM's _VocabParallelCrossEntropy of logits.float()
        // (megatron/mpu/cross_entropy.py; tensor_parallel/cross_entropy.py
        // in Megatron-Core), which saves the fp32 softmax: forward torch.max
        // (read 4), sub_ (read and write 4), exp into itself (8), sum (read
        // 4), div_ by the sum (8), each over every logit, and the per-token
        // gathers and all-reduces beside them; backward the softmax becomes
        // the gradient in place — the target's index update per token and
        // mul_ by the loss gradient (8) — and the cast back is the gradient
        // it holds.
        loss = elementwise(name, OpKind::Loss, n, 4, n, n);
        loss.fwd_bytes = static_cast<Bytes>(n * (cast + 32.0) + 0.5);
        loss.bwd_bytes = static_cast<Bytes>(n * (cast + 8.0) + 0.5);
        loss.fwd_kernels = casts + 5;  // cast, max, sub_, exp, sum, div_
        loss.bwd_kernels = casts + 2;  // index update, mul_, cast
        break;
      case CrossEntropy::Unfused:
        // PyTorch's F.cross_entropy of pred.float(): the cast, log_softmax
        // (saves its fp32 output) and nll_loss forward; backward, nll_loss's
        // fp32 gradient (a filled tensor and a scatter) and log_softmax's
        // fp32 gradient held at once above the saved output, then the cast
        // back.
        loss = elementwise(name, OpKind::Loss, n, 4, n, n);
        loss.grad_bytes = bytes(n, 8);
        loss.fwd_bytes = static_cast<Bytes>(n * (cast + 8.0) + 0.5);
        loss.bwd_bytes = static_cast<Bytes>(n * (cast + 16.0) + 0.5);
        loss.fwd_kernels = casts + 2;  // cast, log_softmax, nll_loss
        loss.bwd_kernels = casts + 3;  // fill and scatter, log_softmax backward, cast
        break;
      case CrossEntropy::Parallel:
        // PyTorch's loss_parallel (torch/distributed/tensor/parallel/
        // loss.py) on the rank's vocabulary shard of logits.float():
        // _log_softmax forward runs amax (read 4), x - max (read 4, write
        // 4), exp (8), sum (read 4) and shifted - logsumexp (8), beside
        // per-token all-reduces, and saves its fp32 output;
        // _nll_loss_and_log_softmax_backward makes zeros_like (write 4),
        // scatters per token, then exp of the output (8), the sum with the
        // zeros-and-scatter tensor (12) and the product with the loss
        // gradient (8) — that tensor, the sum and the product (or exp) held
        // at once, 12 bytes per logit beside the saved output — and the
        // cast back follows.
        loss = elementwise(name, OpKind::Loss, n, 4, n, n);
        loss.grad_bytes = bytes(n, 12);
        loss.fwd_bytes = static_cast<Bytes>(n * (cast + 32.0) + 0.5);
        loss.bwd_bytes = static_cast<Bytes>(n * (cast + 32.0) + 0.5);
        loss.fwd_kernels = casts + 5;  // cast, amax, sub, exp, sum, sub
        loss.bwd_kernels = casts + 5;  // zeros, scatter, exp, add, mul, cast
        break;
      case CrossEntropy::Fused:
        // flash-attn's CrossEntropyLoss (csrc/xentropy, apex's kernel) of
        // the logits as they are: forward one block per token reads its row
        // twice (max and sum, then the sum of exponentials) and keeps the
        // logits and a log-sum-exp per token (not counted); backward reads
        // them once and writes a new gradient of their type
        // (inplace_backward is off).
        loss = elementwise(name, OpKind::Loss, n, e, n, n);
        loss.fwd_bytes = bytes(2.0 * n, e);
        loss.bwd_bytes = bytes(2.0 * n, e);
        loss.fwd_kernels = 1;
        loss.bwd_kernels = 1;
        break;
    }
    return loss;
  }

  // The trainer's metrics over the main head's logits (ExpandOptions::
  // train_metric_passes): each pass PyTorch's cross-entropy of the logits
  // as the unfused loss computes it forward — under autocast the cast to
  // fp32, log_softmax and nll_loss — without gradient: nothing saved for
  // a backward, none run. Its fp32 temporaries live only within the op.
  Op train_metrics() const {
    const Op pass = loss_op("train_metrics", CrossEntropy::Unfused);
    Op op = elementwise("train_metrics", OpKind::Loss, 0, e, 0, 0);
    op.fwd_bytes = o.train_metric_passes * pass.fwd_bytes;
    op.fwd_kernels = o.train_metric_passes * pass.fwd_kernels;
    op.bwd_bytes = 0;
    op.bwd_kernels = 0;
    return op;
  }

  // A prediction module's op names: its block's are the main block's with
  // "mtp_" before them (names are literals: expanding allocates no strings).
  static std::string_view mtp_name(std::string_view name) {
    static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
        {"attn_norm", "mtp_attn_norm"}, {"q_down", "mtp_q_down"}, {"q_down_norm", "mtp_q_down_norm"},
        {"q_up", "mtp_q_up"}, {"q", "mtp_q"}, {"kv_down", "mtp_kv_down"}, {"kv_down_norm", "mtp_kv_down_norm"},
        {"kv_up", "mtp_kv_up"}, {"qkv", "mtp_qkv"}, {"qk_norm", "mtp_qk_norm"}, {"rope", "mtp_rope"},
        {"attention", "mtp_attention"}, {"attn_scores", "mtp_attn_scores"}, {"attn_softcap", "mtp_attn_softcap"},
        {"softmax", "mtp_softmax"},
        {"attn_dropout", "mtp_attn_dropout"}, {"attn_values", "mtp_attn_values"}, {"attn_proj", "mtp_attn_proj"},
        {"attn_post_norm", "mtp_attn_post_norm"}, {"attn_out_dropout", "mtp_attn_out_dropout"},
        {"attn_residual", "mtp_attn_residual"}, {"mlp_norm", "mtp_mlp_norm"}, {"router", "mtp_router"},
        {"mlp_up", "mtp_mlp_up"}, {"mlp_up_gate", "mtp_mlp_up_gate"}, {"gelu", "mtp_gelu"},
        {"swiglu", "mtp_swiglu"}, {"geglu", "mtp_geglu"}, {"mlp_down", "mtp_mlp_down"},
        {"shared_up", "mtp_shared_up"}, {"shared_up_gate", "mtp_shared_up_gate"}, {"shared_act", "mtp_shared_act"},
        {"shared_down", "mtp_shared_down"}, {"shared_gate", "mtp_shared_gate"},
        {"mlp_post_norm", "mtp_mlp_post_norm"}, {"mlp_dropout", "mtp_mlp_dropout"}, {"residual", "mtp_residual"},
        {"mlp_residual", "mtp_mlp_residual"}};
    for (const auto& [from, to] : kNames)
      if (from == name) return to;
    throw Error("expand: op \"" + std::string(name) + "\" has no multi-token prediction name (ops.cpp mtp_name)");
  }

  // One multi-token prediction module (DeepSeek-V3, arXiv:2412.19437 Sec.
  // 2.2 and Fig. 3; Megatron-Core's MultiTokenPredictionLayer, which
  // DeepSeek-V3's checkpoint layer 61 matches: enorm, hnorm, eh_proj, one
  // transformer layer, a final norm): the shared embedding of the token k
  // ahead, an RMSNorm of it and one of the previous depth's hidden state,
  // their concatenation projected 2h → h (M_k, column-parallel without bias
  // as Megatron-Core's eh_proj), one transformer block of the main model's
  // last block's shape (Megatron-Core's get_gpt_mtp_block_spec takes the
  // decoder's last layer spec; DeepSeek-V3's layer 61 has routed experts),
  // a final norm, the shared output head's logits and a cross-entropy loss.
  // The embedding and the output head hold no parameters here: they are the
  // main model's.
  void mtp_module(std::vector<Op>& ops) const {
    Op emb;
    emb.name = "mtp_embedding";
    emb.kind = OpKind::Embedding;
    emb.fwd_bytes = bytes(2.0 * b * s * h, e);
    emb.bwd_bytes = 2 * emb.fwd_bytes;
    ops.push_back(emb);
    ops.push_back(norm("mtp_enorm"));
    ops.push_back(norm("mtp_hnorm"));
    ops.push_back(linear("mtp_eh_proj", 2 * h, h, Split::Column, /*in_rep=*/true, false));
    const std::int64_t last = m.layers - 1;
    for (Op op : block(m.moe_at(last), m.windowed_at(last)).ops) {
      op.name = mtp_name(op.name);
      ops.push_back(op);
    }
    ops.push_back(norm("mtp_final_norm"));
    ops.push_back(logits_op("mtp_logits", /*shared=*/true));
    if (m.logit_softcap) ops.push_back(softcap("mtp_logit_softcap", shard(b * s * V), false));
    ops.push_back(loss_op("mtp_loss", o.cross_entropy));
  }

  Layer head() const {
    Layer l;
    l.name = "head";
    l.kind = LayerKind::Head;
    l.input_bytes = bytes(rep(b * s * h), e);
    l.ops.push_back(norm("final_norm"));
    l.ops.push_back(logits_op("logits", /*shared=*/false));
    if (m.logit_softcap) l.ops.push_back(softcap("logit_softcap", shard(b * s * V), false));
    l.ops.push_back(loss_op("loss", o.cross_entropy));
    if (o.train_metric_passes > 0) l.ops.push_back(train_metrics());
    for (std::int64_t k = 0; k < m.mtp_layers; ++k) mtp_module(l.ops);
    return l;
  }
};

}  // namespace

bool SizeBound::countable() const { return total() <= static_cast<double>(kMaxBytes); }

std::string SizeBound::rule(const std::string& what) const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "needs about %.3g bytes (%.3g parameters, %.3g bytes of activations for %s); "
                "Strata counts at most 2^60 bytes (1 EiB)",
                total(), params, activation_bytes, what.c_str());
  return buf;
}

SizeBound size_bound(const ModelSpec& m, double micro_batch, double microbatches,
                     double gpus_per_node, AttentionKernel attention) {
  const double L = static_cast<double>(m.layers), h = static_cast<double>(m.hidden),
               a = static_cast<double>(m.heads), f = static_cast<double>(m.ffn_hidden),
               V = static_cast<double>(m.vocab), s = static_cast<double>(m.seq_len),
               kv = m.head_size || m.mla ? static_cast<double>(m.kv_hidden())
                                         : static_cast<double>(m.kv_heads) * h / a,
               E = m.moe ? static_cast<double>(m.moe->experts) : 1.0,
               k = m.moe ? static_cast<double>(m.moe->top_k) : 1.0;
  // What the architecture's options add to a plain block (0 without them),
  // in parameters and in elements per token: wider or latent attention,
  // expert widths, shared experts, dense first blocks, q/k norms, post-norms.
  double extra = 0, extra_act = 0;
  if (m.head_size || m.mla) {
    const double qd = static_cast<double>(m.q_hidden()), od = static_cast<double>(m.attn_out_hidden());
    extra += h * (qd + 2 * kv) + od * h + qd + 2 * kv + h;
    extra_act += qd + od + 2 * kv;
    if (m.mla) {
      const double ql = static_cast<double>(m.mla->q_lora_rank.value_or(0)),
                   kvl = static_cast<double>(m.mla->kv_lora_rank),
                   rope = static_cast<double>(m.mla->qk_rope_head_dim),
                   up = a * static_cast<double>(m.mla->qk_nope_head_dim + m.mla->v_head_dim);
      extra += h * ql + ql * qd + h * (kvl + rope) + kvl * up + 2 * (ql + kvl + rope);
      extra_act += ql + kvl + rope + up;
    }
  }
  if (m.moe) {
    const double fe = static_cast<double>(m.expert_ffn()), fs = static_cast<double>(m.shared_ffn()),
                 S = static_cast<double>(m.moe->shared_experts);
    if (m.moe->expert_ffn) {
      extra += 3 * E * h * fe + 3 * E * fe;
      extra_act += k * (h + 2 * fe);
    }
    if (m.moe->shared_experts > 0) {
      extra += 3 * S * h * fs + 3 * S * fs + h;
      extra_act += S * (h + 2 * fs);
    }
    if (m.moe_blocks() < m.layers) {  // dense blocks among the expert ones
      extra += 3 * h * f + 3 * f;
      extra_act += h + 2 * f;
    }
  }
  if (m.qk_norm != QkNorm::None) {
    extra += 2 * (static_cast<double>(m.q_hidden()) + 2 * kv);
    extra_act += static_cast<double>(m.q_hidden()) + 2 * kv;
  }
  if (m.norm_placement != NormPlacement::Pre) {
    extra += 4 * h;
    extra_act += 2 * h;
  }
  SizeBound b;
  // Attention (QKV, projection), experts' MLPs (up, gate, down), router,
  // biases and norms; embeddings (token, position) and an untied head.
  const double block =
      h * (h + 2 * kv) + h * h + 3 * E * h * f + E * h + 3 * E * f + 2 * kv + 8 * h + extra;
  b.params = L * block + 2 * V * h + std::max(s, static_cast<double>(m.position_rows())) * h + 4 * h;
  // Per token, 32 bytes per element (4 in fp32: kept, its gradient, and
  // read and written forward and backward): what a block keeps and touches
  // (ops.cpp: norms, inputs of every matrix product, Q/K/V, the experts'
  // inputs and activations, routing, dropout masks, attention statistics or
  // scores), and the head's fp32 logits.
  const double attn = attention == AttentionKernel::Standard ? 32 * 5 * a * s : 32 * a;
  const double per_block =
      32 * (16 * h + 4 * kv + 4 * k * (h + 2 * f) + 4 * E + 4 * extra_act) + attn;
  // A multi-token prediction module is a block, a 2h → h projection, three
  // norms and a second head's fp32 logits.
  const double D = static_cast<double>(m.mtp_layers);
  b.params += D * (block + 2 * h * h + 4 * h);
  b.state_bytes = 32 * b.params * gpus_per_node;
  const double per_token = (L + D) * per_block + (1 + D) * (128 * V + 128 * h + 32) + D * 32 * 8 * h;
  b.activation_bytes = microbatches * micro_batch * s * per_token;
  return b;
}

namespace {

// A layer-chain model as an op chain: each stage one block of one Stage op,
// the stages of equal costs (and equal input) one kind. Per microbatch of b
// samples: the op keeps the stage's input and its saved tensors for the
// backward (its output is the next stage's input, kept there; the last
// stage's by the head, where the loss reads it); while its backward runs it
// holds its output's gradient and its workspace; it moves its input, output
// and saved tensors forward and twice that backward (as strata tradeoff
// prices a stage). The embedding holds the chain's input, the head the last
// output; neither computes.
OpChain expand_chain(const ModelSpec& model, const ExpandOptions& opts) {
  if (opts.tp != 1 || opts.cp != 1 || opts.ep != 1 || opts.sequence_parallel)
    throw Error("expand: a layer chain \"" + model.name + "\" runs with tp, cp and ep 1");
  const LayerChain& lc = *model.chain;
  const Bytes b = opts.micro_batch;
  OpChain c;
  c.embedding.name = "embedding";
  c.embedding.kind = LayerKind::Embedding;
  c.embedding.input_bytes = b * lc.input_bytes;
  c.head.name = "head";
  c.head.kind = LayerKind::Head;
  c.blocks = static_cast<std::int64_t>(lc.layers.size());
  c.kind_of.reserve(lc.layers.size());
  struct Key {
    Bytes input;
    const ChainLayer* layer;
    bool operator==(const Key& o) const {
      const ChainLayer &x = *layer, &y = *o.layer;
      return input == o.input && x.fwd_flops == y.fwd_flops && x.bwd_flops == y.bwd_flops &&
             x.params == y.params && x.output_bytes == y.output_bytes && x.saved_bytes == y.saved_bytes &&
             x.workspace_bytes == y.workspace_bytes;
    }
  };
  std::vector<Key> keys;
  Bytes input = lc.input_bytes;
  for (const ChainLayer& l : lc.layers) {
    const Key key{input, &l};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      Op op;
      op.name = "stage";
      op.kind = OpKind::Stage;
      op.params = l.params;
      op.fwd_flops = l.fwd_flops * static_cast<double>(b);
      op.bwd_flops = l.bwd_flops * static_cast<double>(b);
      op.fwd_bytes = b * (input + l.output_bytes + l.saved_bytes);
      op.bwd_bytes = 2 * op.fwd_bytes;
      op.saved_bytes = b * (input + l.saved_bytes);
      op.grad_bytes = b * (l.output_bytes + l.workspace_bytes);
      Layer layer;
      layer.name = "block";
      layer.kind = LayerKind::Block;
      layer.block_kind = static_cast<std::int32_t>(c.kinds.size());
      layer.input_bytes = b * input;
      layer.ops.push_back(op);
      c.kinds.push_back(std::move(layer));
      keys.push_back(key);
      it = keys.end() - 1;
    }
    c.kind_of.push_back(static_cast<std::int32_t>(it - keys.begin()));
    input = l.output_bytes;
  }
  c.head.input_bytes = b * input;
  return c;
}

}  // namespace

OpChain expand(const ModelSpec& model, const ExpandOptions& opts) {
  if (opts.micro_batch < 1 || opts.tp < 1 || opts.cp < 1 || opts.ep < 1)
    throw Error("expand: micro_batch, tp, cp and ep must be >= 1");
  if (model.chain) return expand_chain(model, opts);
  if (opts.ep > 1 && (!model.moe || model.moe->experts % opts.ep != 0))
    throw Error("expand: ep must divide the number of experts");
  Builder bld(model, opts);
  // Blocks kept in bf16 under fp8 or fp4 are built as bf16 blocks (their
  // saved inputs 16-bit) whose Linear ops are marked unquantized (priced as
  // bf16 GEMMs: op_gemm_dtype).
  ExpandOptions opts16 = opts;
  opts16.precision = Precision::BF16;
  const Builder bld16(model, opts16);
  const bool quantized = quantized_gemms(opts.precision);
  OpChain c;
  c.embedding = bld.embedding();
  // Each block shape present is one kind, in a fixed order (the main block
  // first): the expert MLP before a dense one, and within each full
  // attention before a sliding window, quantized before bf16.
  struct Shape {
    bool moe;
    bool windowed;
    bool bf16;
    bool operator==(const Shape&) const = default;
  };
  auto shape_at = [&](std::int64_t i) {
    const bool bf16 = quantized && (i < opts.bf16_first_layers || i >= model.layers - opts.bf16_last_layers);
    return Shape{model.moe_at(i), model.windowed_at(i), bf16};
  };
  std::vector<Shape> shapes;
  c.blocks = model.layers;
  c.kind_of.resize(static_cast<std::size_t>(model.layers));
  for (const bool moe : {true, false})
    for (const bool windowed : {false, true})
      for (const bool bf16 : {false, true})
        for (std::int64_t i = 0; i < model.layers; ++i)
          if (shape_at(i) == Shape{moe, windowed, bf16}) {
            shapes.push_back({moe, windowed, bf16});
            break;
          }
  for (const Shape& sh : shapes) {
    c.kinds.push_back((sh.bf16 ? bld16 : bld).block(sh.moe, sh.windowed));
    Layer& l = c.kinds.back();
    l.block_kind = static_cast<std::int32_t>(c.kinds.size() - 1);
    if (sh.bf16) {
      l.unquantized = true;
      for (Op& op : l.ops) op.unquantized = op.kind == OpKind::Linear;
    }
  }
  for (std::int64_t i = 0; i < model.layers; ++i)
    c.kind_of[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(
        std::find(shapes.begin(), shapes.end(), shape_at(i)) - shapes.begin());
  c.head = bld.head();
  return c;
}

std::int64_t total_params(const ModelSpec& model) {
  if (model.chain) return model.chain->params();
  return expand(model).params();
}

std::int64_t active_params(const ModelSpec& model) {
  if (model.chain) return model.chain->params();
  const OpChain c = expand(model);
  if (!model.moe) return c.params();
  // A routed-expert op holds `experts` copies; a token visits top_k of them:
  // in each block with experts, and in a multi-token prediction module's
  // block when it has them (its ops are the head's).
  auto unvisited = [&](const Layer& l) {
    std::int64_t n = 0;
    for (const Op& op : l.ops)
      if (op.expert) n += op.params / model.moe->experts * (model.moe->experts - model.moe->top_k);
    return n;
  };
  return c.params() - model.moe_blocks() * unvisited(c.main_block()) - unvisited(c.head);
}

}  // namespace strata::cost
