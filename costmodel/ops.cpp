#include "costmodel/ops.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "sim/error.hpp"
#include "sim/limits.hpp"

namespace strata::cost {

std::int64_t Layer::params() const {
  std::int64_t n = 0;
  for (const auto& op : ops) n += op.params;
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
    case Recompute::Full:
      return input_bytes;
    default:
      throw Error("saved_bytes: recompute policy '" + std::string(enum_name(policy)) +
                  "' is a schedule over layers, not a per-layer rule");
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

std::int64_t OpChain::params() const {
  return embedding.params() + blocks * block.params() + head.params();
}
Flops OpChain::fwd_flops() const {
  return embedding.fwd_flops() + static_cast<double>(blocks) * block.fwd_flops() +
         head.fwd_flops();
}
Flops OpChain::bwd_flops() const {
  return embedding.bwd_flops() + static_cast<double>(blocks) * block.bwd_flops() +
         head.bwd_flops();
}

namespace {

// Builds ops with the shape bookkeeping shared by every op of a layer.
struct Builder {
  const ModelSpec& m;
  const ExpandOptions& o;
  double b, s, s_full, h, t, kvh, f, a, V;
  Bytes e, gi;

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
        e(activation_bytes(opts.precision)),
        gi(gemm_input_bytes(opts.precision)) {}

  // Elements of a tensor outside the tensor-parallel region: replicated on
  // every tp rank unless sequence parallelism splits it.
  double rep(double elems) const { return o.sequence_parallel ? elems / t : elems; }
  // Elements of a tensor inside the tensor-parallel region.
  double shard(double elems) const { return elems / t; }
  static Bytes bytes(double elems, Bytes per) {
    return static_cast<Bytes>(elems * static_cast<double>(per) + 0.5);
  }

  // A linear layer of `in` → `out` features, column-parallel (output
  // features split by tp) or row-parallel (input features split). `in_rep`:
  // its input lies in the replicated region (saved per rep()). `tokens`
  // multiplies the tokens it processes (MoE top-k), `copies` its weights
  // (MoE experts).
  Op linear(std::string_view name, double in, double out, bool column, bool in_rep,
            double tokens = 1.0, double copies = 1.0) const {
    Op op;
    op.name = name;
    op.kind = OpKind::Linear;
    const double w = in * out / t;
    // Column-parallel bias is split; row-parallel bias is replicated.
    const double bias = m.bias ? (column ? out / t : out) : 0.0;
    op.params = static_cast<std::int64_t>(copies * (w + bias));
    op.matrices = static_cast<std::int64_t>(copies);
    op.rows = static_cast<std::int64_t>(column ? in : in / t);
    op.cols = static_cast<std::int64_t>(column ? out / t : out);
    op.fwd_flops = tokens * 2.0 * b * s * in * out / t;
    op.bwd_flops = 2.0 * op.fwd_flops;
    const double in_elems = b * s * in;
    const double saved = tokens * (in_rep ? rep(in_elems) : shard(in_elems));
    op.saved_bytes = bytes(saved, gi);
    const double out_elems = tokens * b * s * (column ? out / t : out);
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

  Op norm(std::string_view name) const {
    Op op = elementwise(name, OpKind::Norm, rep(b * s * h), e, rep(b * s * h), rep(b * s * h));
    op.params = static_cast<std::int64_t>(m.norm == NormKind::LayerNorm ? 2 * h : h);
    return op;
  }

  Op dropout_mask(std::string_view name, double elems, bool core = false) const {
    return elementwise(name, OpKind::Dropout, elems, 1, elems, elems, core);
  }

  void attention(std::vector<Op>& ops) const {
    const double q = b * s * h, kv = b * s * kvh;
    // Scores and values each cost 2·b·s·s_full·h (each local query against all
    // keys of the sequence; s = s_full without context parallelism).
    const double core_flops = 2.0 * b * s * s_full * h / t;
    if (o.attention == AttentionKernel::Flash) {
      Op op;
      op.name = "attention";
      op.kind = OpKind::Attention;
      op.fwd_flops = 2.0 * core_flops;
      op.bwd_flops = 2.0 * op.fwd_flops;
      // Saves Q, K, V (its inputs) and fp32 log-sum-exp per head and query;
      // its output is saved as the projection's input.
      op.saved_bytes = bytes(shard(q + 2.0 * kv), e) + bytes(shard(a * b * s), 4);
      op.fwd_bytes = bytes(shard(2.0 * q + 2.0 * kv), e);
      op.grad_bytes = bytes(shard(q), e);
      op.bwd_bytes = 2 * op.fwd_bytes;
      ops.push_back(op);
      return;
    }
    const double scores = a * b * s * s_full;  // elements of the score matrix
    Op qk = elementwise("attn_scores", OpKind::AttnScores, shard(q + kv), e,
                        shard(q + kv + scores), shard(scores));
    qk.fwd_flops = core_flops;
    qk.bwd_flops = 2.0 * core_flops;
    ops.push_back(qk);
    ops.push_back(elementwise("softmax", OpKind::Softmax, shard(scores), e, shard(scores),
                              shard(scores), true));
    if (m.dropout) ops.push_back(dropout_mask("attn_dropout", shard(scores), true));
    // Values: saves V, and the dropout output when dropout made a new tensor
    // (otherwise its input is the softmax output, already saved).
    Op av = elementwise("attn_values", OpKind::AttnValues, shard(kv), e, shard(scores + kv + q),
                        shard(q));
    if (m.dropout) {
      av.core_saved_bytes = bytes(shard(scores), e);
      av.saved_bytes += av.core_saved_bytes;
    }
    av.fwd_flops = core_flops;
    av.bwd_flops = 2.0 * core_flops;
    ops.push_back(av);
  }

  void mlp(std::vector<Op>& ops) const {
    const double mult = m.moe ? static_cast<double>(m.moe->top_k) : 1.0;
    const double experts = m.moe ? static_cast<double>(m.moe->experts) : 1.0;
    // Expert parallelism spreads the experts; tokens still visit top_k each.
    const double local_experts = experts / static_cast<double>(o.ep);
    if (m.moe) {
      // The gate is replicated (not split by tp) and keeps fp32 routing
      // probabilities; its input is the experts' input, saved there.
      Op router;
      router.name = "router";
      router.kind = OpKind::Router;
      router.params = static_cast<std::int64_t>(h * experts);
      router.matrices = 1;
      router.rows = m.hidden;
      router.cols = m.moe->experts;
      router.fwd_flops = 2.0 * b * s * h * experts;
      router.bwd_flops = 2.0 * router.fwd_flops;
      router.saved_bytes = bytes(b * s * experts, 4);
      router.fwd_bytes = bytes(router.params, e) + bytes(b * s * (h + experts), e);
      router.bwd_bytes = 2 * router.fwd_bytes;
      router.grad_bytes = bytes(b * s * experts, 4);
      ops.push_back(router);
    }
    // Each token visits top_k experts; the weights exist once per expert.
    const bool swiglu = m.mlp == MlpKind::Swiglu;
    ops.push_back(linear(swiglu ? "mlp_up_gate" : "mlp_up", h, swiglu ? 2 * f : f,
                         /*column=*/true, /*in_rep=*/true, mult, local_experts));
    ops.back().expert = m.moe.has_value();
    // GeLU saves its input; SwiGLU saves gate and up projections.
    const double act_saved = mult * shard(b * s * f) * (swiglu ? 2.0 : 1.0);
    const double act_out = mult * shard(b * s * f);
    ops.push_back(elementwise(swiglu ? "swiglu" : "gelu", OpKind::Activation, act_saved, e,
                              act_saved, act_out));
    ops.push_back(linear("mlp_down", f, h, /*column=*/false, /*in_rep=*/false, mult, local_experts));
    ops.back().expert = m.moe.has_value();
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
      pos.params = static_cast<std::int64_t>(s_full * h);  // replicated
      pos.matrices = 1;
      pos.rows = m.seq_len;
      pos.cols = m.hidden;
      pos.fwd_bytes = bytes(2.0 * b * s * h, e);
      pos.bwd_bytes = 2 * pos.fwd_bytes;
      l.ops.push_back(pos);
    }
    if (m.dropout) l.ops.push_back(dropout_mask("embedding_dropout", rep(b * s * h)));
    return l;
  }

  Layer block() const {
    Layer l;
    l.name = "block";
    l.kind = LayerKind::Block;
    l.ops.reserve(18);
    l.input_bytes = bytes(rep(b * s * h), e);
    auto& ops = l.ops;
    ops.push_back(norm("attn_norm"));
    ops.push_back(linear("qkv", h, h + 2 * kvh, /*column=*/true, /*in_rep=*/true));
    attention(ops);
    ops.push_back(linear("attn_proj", h, h, /*column=*/false, /*in_rep=*/false));
    if (m.dropout) ops.push_back(dropout_mask("attn_out_dropout", rep(b * s * h)));
    ops.push_back(elementwise("attn_residual", OpKind::Residual, 0.0, e, rep(b * s * h), rep(b * s * h)));
    ops.push_back(norm("mlp_norm"));
    mlp(ops);
    if (m.dropout) ops.push_back(dropout_mask("mlp_dropout", rep(b * s * h)));
    ops.push_back(elementwise("mlp_residual", OpKind::Residual, 0.0, e, rep(b * s * h), rep(b * s * h)));
    return l;
  }

  Layer head() const {
    Layer l;
    l.name = "head";
    l.kind = LayerKind::Head;
    l.ops.reserve(3);
    l.input_bytes = bytes(rep(b * s * h), e);
    l.ops.push_back(norm("final_norm"));
    Op logits = linear("logits", h, V, /*column=*/true, /*in_rep=*/true);
    logits.params = m.tied_embeddings ? 0 : static_cast<std::int64_t>(V * h / t);
    logits.matrices = m.tied_embeddings ? 0 : 1;
    logits.rows = static_cast<std::int64_t>(V / t);
    logits.cols = m.hidden;
    l.ops.push_back(logits);
    // Cross-entropy keeps fp32 logits (vocabulary-parallel) for backward.
    // Its backward turns the saved fp32 softmax into the gradient in place
    // (Megatron-LM's vocab-parallel cross-entropy) and casts it back to the
    // activation type: that cast is the gradient it holds.
    l.ops.push_back(elementwise("loss", OpKind::Loss, shard(b * s * V), 4, shard(b * s * V),
                                shard(b * s * V)));
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
               kv = static_cast<double>(m.kv_heads) * h / a,
               E = m.moe ? static_cast<double>(m.moe->experts) : 1.0,
               k = m.moe ? static_cast<double>(m.moe->top_k) : 1.0;
  SizeBound b;
  // Attention (QKV, projection), experts' MLPs (up, gate, down), router,
  // biases and norms; embeddings (token, position) and an untied head.
  const double block = h * (h + 2 * kv) + h * h + 3 * E * h * f + E * h + 3 * E * f + 2 * kv + 8 * h;
  b.params = L * block + 2 * V * h + s * h + 4 * h;
  b.state_bytes = 32 * b.params * gpus_per_node;
  // Per token, 32 bytes per element (4 in fp32: kept, its gradient, and
  // read and written forward and backward): what a block keeps and touches
  // (ops.cpp: norms, inputs of every matrix product, Q/K/V, the experts'
  // inputs and activations, routing, dropout masks, attention statistics or
  // scores), and the head's fp32 logits.
  const double attn = attention == AttentionKernel::Standard ? 32 * 5 * a * s : 32 * a;
  const double per_block = 32 * (16 * h + 4 * kv + 4 * k * (h + 2 * f) + 4 * E) + attn;
  const double per_token = L * per_block + 128 * V + 128 * h + 32;
  b.activation_bytes = microbatches * micro_batch * s * per_token;
  return b;
}

OpChain expand(const ModelSpec& model, const ExpandOptions& opts) {
  if (opts.micro_batch < 1 || opts.tp < 1 || opts.cp < 1 || opts.ep < 1)
    throw Error("expand: micro_batch, tp, cp and ep must be >= 1");
  if (model.chain)
    throw Error("expand: model \"" + model.name +
                "\" is a layer chain, not a transformer (strategies::require_transformer "
                "rejects it with the input's name)");
  if (opts.ep > 1 && (!model.moe || model.moe->experts % opts.ep != 0))
    throw Error("expand: ep must divide the number of experts");
  Builder bld(model, opts);
  OpChain c;
  c.embedding = bld.embedding();
  c.block = bld.block();
  c.blocks = model.layers;
  c.head = bld.head();
  return c;
}

}  // namespace strata::cost
