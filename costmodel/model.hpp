#pragma once
// Model description: the architecture of a transformer (GPT, Llama, Mixtral
// style) as plain data, independent of any plan or hardware.
#include <algorithm>
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

// The MLP: GeLU (two matrices), or a gated unit of three matrices whose gate
// goes through SiLU (SwiGLU: Llama, Mistral, Qwen) or GeLU (GeGLU: Gemma).
enum class MlpKind { Gelu, Swiglu, Geglu };
enum class NormKind { LayerNorm, RmsNorm };
enum class PositionEmbedding { Learned, Rope, Alibi, None };
// Where a block's norms sit: before attention and MLP (pre: GPT-2, Llama),
// after them, on their outputs before the residual add (post: OLMo 2), or
// both (sandwich: Gemma 2 and 3, four norms a block).
enum class NormPlacement { Pre, Post, Sandwich };
// Attention and MLP one after the other (sequential), or both reading the
// block's input and added to it together: with one shared norm (parallel:
// GPT-J, Falcon-7B) or one norm each (parallel_2norm: GPT-NeoX/Pythia,
// Falcon-40B and later).
enum class BlockKind { Sequential, Parallel, Parallel2Norm };
// Norms on queries and keys before attention: none, one of head_dim
// features shared by all heads (head: Qwen3, Gemma 3), or one over all
// heads' features (full: OLMo 2).
enum class QkNorm { None, Head, Full };

struct MoeSpec {
  std::int64_t experts = 1;  // routed experts
  std::int64_t top_k = 1;    // routed experts each token visits
  // An expert's MLP width (moe_intermediate_size); the model's ffn_hidden
  // unless given (ffn_hidden stays the width of the dense layers).
  std::optional<std::int64_t> expert_ffn;
  // Shared experts every token visits besides its top_k (DeepSeek, Qwen-MoE),
  // each of `shared_ffn` width (the expert width unless given).
  std::int64_t shared_experts = 0;
  std::optional<std::int64_t> shared_ffn;
  // A sigmoid gate h → 1 scaling the shared experts' output (Qwen2-MoE).
  bool shared_gate = false;
  // Which blocks have the routed experts; the others have a dense MLP of
  // ffn_hidden. Block i (0-based) has them when all three hold:
  //   i >= first_dense, i % every == offset, i not in dense_layers.
  // Every rule the frameworks use is one of these:
  // - DeepSeek-V2/V3 (modeling_deepseek.py, the remote code of the
  //   deepseek-ai Hub repositories, DeepseekV3DecoderLayer.__init__: MoE when
  //   layer_idx >= first_k_dense_replace and layer_idx % moe_layer_freq ==
  //   0): first_dense = first_k_dense_replace, every = moe_layer_freq,
  //   offset 0;
  // - Qwen2-MoE and Qwen3-MoE (transformers, modeling_qwen2_moe.py and
  //   modeling_qwen3_moe.py, Qwen2MoeDecoderLayer.__init__: sparse when
  //   layer_idx not in mlp_only_layers and (layer_idx + 1) %
  //   decoder_sparse_step == 0): every = decoder_sparse_step, offset =
  //   decoder_sparse_step - 1 (i + 1 ≡ 0 is i ≡ step - 1), dense_layers =
  //   mlp_only_layers;
  // - Megatron-Core's integer --moe-layer-freq N (megatron/core/models/gpt/
  //   gpt_layer_specs.py, get_gpt_decoder_layer_specs: 1 if i % N == 0):
  //   every = N, offset 0.
  std::int64_t first_dense = 0;
  std::int64_t every = 1;   // >= 1
  std::int64_t offset = 0;  // 0 <= offset < every
  std::vector<std::int64_t> dense_layers;  // ascending, unique, each < layers
};

// Multi-head latent attention (DeepSeek-V2/V3): keys and values come from a
// shared low-rank latent per token, queries optionally from one too; each
// head's query and key are a part without positions (qk_nope_head_dim) and
// a rotary part (qk_rope_head_dim, the key's shared by all heads).
struct MlaSpec {
  std::optional<std::int64_t> q_lora_rank;  // none: queries projected from the input
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Sliding-window (local) attention (Mistral, Gemma 2 and 3): a windowed
// layer's query attends to the `size` most recent keys, itself included
// (Hugging Face transformers, masking_utils.py sliding_window_overlay:
// kv_idx > q_idx - sliding_window, under the causal mask). With
// `global_every`, every global_every-th layer counting from 1 attends to
// the whole sequence instead: layer i (0-based) is global when
// (i + 1) % global_every == 0. That is transformers' rule for Gemma 3
// (configuration_gemma3.py: "sliding_attention" if bool((i + 1) %
// sliding_window_pattern), the pattern 6 by default) and for Gemma 2
// (configuration_gemma2.py: bool((i + 1) % 2), global_every 2).
struct AttentionWindow {
  std::int64_t size = 0;  // keys a windowed query attends to
  // None: every layer is windowed.
  std::optional<std::int64_t> global_every;
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
  // Features per attention head; hidden / heads unless given (Gemma-7B:
  // 256 with hidden 3072 and 16 heads). Ignored with `mla`.
  std::optional<std::int64_t> head_size;
  MlpKind mlp = MlpKind::Gelu;
  NormKind norm = NormKind::LayerNorm;
  NormPlacement norm_placement = NormPlacement::Pre;
  BlockKind block = BlockKind::Sequential;
  QkNorm qk_norm = QkNorm::None;
  bool bias = true;  // linear layers have biases
  // The query, key and value projections have biases; `bias` unless given
  // (Qwen2: only these).
  std::optional<bool> qkv_bias;
  PositionEmbedding position_embedding = PositionEmbedding::Learned;
  // The rotary base θ of rope positions (Hugging Face's rope_theta;
  // Megatron-LM's --rotary-base, default 10000); unset: not known. It
  // changes no cost, only what an engine is told.
  std::optional<double> rope_theta;
  bool tied_embeddings = true;
  // Dropout after attention scores, attention output, MLP output and the
  // embedding (Megatron GPT); its masks are saved for backward.
  bool dropout = false;
  // Rows of the learned position table (GPT-2's n_positions); seq_len
  // unless given.
  std::optional<std::int64_t> max_positions;
  std::optional<MoeSpec> moe;
  std::optional<MlaSpec> mla;
  // Sliding-window attention in some or all layers; none: every layer
  // attends to the whole (causal) sequence.
  std::optional<AttentionWindow> attention_window;
  // Soft-capping (Gemma 2): scores, or output logits, pass through
  // cap · tanh(x / cap) (transformers' modeling_gemma2.py: in
  // eager_attention_forward for the scores, after lm_head for the logits:
  // a division, tanh and a product, the tanh's output kept for backward).
  // The caps do not change the cost; they are kept for the description.
  std::optional<double> attn_softcap, logit_softcap;
  // Multi-token prediction modules (DeepSeek-V3, arXiv:2412.19437 Sec. 2.2):
  // D sequential modules after the main model, module k predicting the token
  // k + 1 ahead with its own transformer block (the last block's shape),
  // two RMSNorms and a 2h → h projection, sharing the embedding and output
  // head. 0: none. Built into the head (OpChain::head), on the last stage.
  std::int64_t mtp_layers = 0;
  // A layer-chain model: `layers` is its stage count and the transformer
  // dimensions are 0.
  std::optional<LayerChain> chain;
  std::string source;  // where the numbers come from (presets)

  std::int64_t head_dim() const { return head_size ? *head_size : hidden / heads; }
  // Query features per token: heads · head_dim (MLA: heads · its query-key
  // head dimension).
  std::int64_t q_hidden() const { return heads * (mla ? mla->qk_head_dim() : head_dim()); }
  // Features per token of one of K and V: kv_heads · head_dim. With MLA,
  // keys and values differ in width (heads · qk_head_dim and heads ·
  // v_head_dim) and this is their mean, so 2·kv_hidden() is what a token's K
  // and V hold together.
  std::int64_t kv_hidden() const {
    return mla ? heads * (mla->qk_head_dim() + mla->v_head_dim) / 2 : kv_heads * head_dim();
  }
  // Features per token entering the attention output projection.
  std::int64_t attn_out_hidden() const { return heads * (mla ? mla->v_head_dim : head_dim()); }
  bool has_qkv_bias() const { return qkv_bias.value_or(bias); }
  // With a pipeline (pp > 1) the last stage keeps its own copy of the word
  // embedding, whose gradient the first and last stage all-reduce, when the
  // output layer shares it (tied embeddings: Megatron-LM) or the
  // multi-token prediction modules there embed their shifted tokens
  // (Megatron-Core's GPTModel builds the embedding `if self.pre_process or
  // self.mtp_process`; finalize_model_grads.py, _allreduce_word_embedding_grads:
  // "we also need to maintain duplicated embedding weights in mtp process
  // stage").
  bool embedding_on_last_stage(std::int64_t pp) const {
    return pp > 1 && !chain && (tied_embeddings || mtp_layers > 0);
  }
  std::int64_t position_rows() const { return max_positions.value_or(seq_len); }
  // What a throughput counts per sample of the batch: its tokens, or one
  // for a layer chain (whose "tokens per second" are samples per second).
  std::int64_t tokens_per_sample() const { return chain ? 1 : seq_len; }
  // What those "tokens" are, for people: "tokens", or "samples".
  const char* throughput_unit() const { return chain ? "samples" : "tokens"; }
  // MoE widths (0 without MoE).
  std::int64_t expert_ffn() const { return moe ? moe->expert_ffn.value_or(ffn_hidden) : 0; }
  std::int64_t shared_ffn() const {
    return moe && moe->shared_experts > 0 ? moe->shared_ffn.value_or(expert_ffn()) : 0;
  }
  // Whether block i (0-based) has the routed experts (MoeSpec's rule).
  bool moe_at(std::int64_t i) const {
    return moe && i >= moe->first_dense && i % moe->every == moe->offset &&
           !std::binary_search(moe->dense_layers.begin(), moe->dense_layers.end(), i);
  }
  // Blocks whose MLP is the routed experts (0 without MoE).
  std::int64_t moe_blocks() const {
    std::int64_t n = 0;
    for (std::int64_t i = 0; moe && i < layers; ++i) n += moe_at(i) ? 1 : 0;
    return n;
  }
  // Whether block i (0-based) has windowed attention (AttentionWindow).
  bool windowed_at(std::int64_t i) const {
    return attention_window &&
           !(attention_window->global_every && (i + 1) % *attention_window->global_every == 0);
  }
  // Keys a windowed layer's query attends to (0 without a window).
  std::int64_t window_size() const { return attention_window ? attention_window->size : 0; }
};

}  // namespace strata::cost

namespace strata {

template <>
struct EnumNames<cost::MlpKind> {
  static constexpr std::array<std::pair<cost::MlpKind, std::string_view>, 3> table{
      {{cost::MlpKind::Gelu, "gelu"}, {cost::MlpKind::Swiglu, "swiglu"}, {cost::MlpKind::Geglu, "geglu"}}};
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

template <>
struct EnumNames<cost::NormPlacement> {
  static constexpr std::array<std::pair<cost::NormPlacement, std::string_view>, 3> table{
      {{cost::NormPlacement::Pre, "pre"},
       {cost::NormPlacement::Post, "post"},
       {cost::NormPlacement::Sandwich, "sandwich"}}};
};
template <>
struct EnumNames<cost::BlockKind> {
  static constexpr std::array<std::pair<cost::BlockKind, std::string_view>, 3> table{
      {{cost::BlockKind::Sequential, "sequential"},
       {cost::BlockKind::Parallel, "parallel"},
       {cost::BlockKind::Parallel2Norm, "parallel_2norm"}}};
};
template <>
struct EnumNames<cost::QkNorm> {
  static constexpr std::array<std::pair<cost::QkNorm, std::string_view>, 3> table{
      {{cost::QkNorm::None, "none"}, {cost::QkNorm::Head, "head"}, {cost::QkNorm::Full, "full"}}};
};

}  // namespace strata
