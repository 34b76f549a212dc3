#pragma once
// A GPT-style transformer trained for real on the CPU: the plain single-rank
// training step every parallel technique will be checked against.
//
// The model follows the op chain of costmodel/ops.hpp (standard attention,
// no dropout): embedding (+ learned positions), `layers` blocks of
// [norm → qkv → causal attention → projection + residual → norm → MLP up →
// GeLU or SwiGLU → MLP down + residual], final norm, logits tied to the
// embedding (or a separate [vocab × hidden] matrix), softmax cross-entropy
// averaged over tokens. Each op keeps for backward exactly what the op chain
// says it saves, so the saved bytes equal cost::expand's at fp32.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/common/param_table.hpp"
#include "backend/common/step_options.hpp"
#include "backend/cpu/allocator.hpp"
#include "backend/cpu/comm.hpp"
#include "backend/cpu/tensor.hpp"
#include "costmodel/model.hpp"
#include "costmodel/techniques.hpp"

namespace strata::backend::cpu {

// Tensor parallelism of one model replica, as Megatron-LM splits a GPT
// (Shoeybi et al. 2019; Korthikanti et al. 2022 for sequence parallelism):
// qkv and the MLP's first linear column-parallel (heads and ffn split), the
// attention projection and the MLP's second linear row-parallel, the word
// embedding and the logits split by vocabulary, cross-entropy computed over
// the split vocabulary. Without sequence parallelism the residual stream is
// whole on every rank and the row-parallel outputs and column-parallel input
// gradients are all-reduced; with it the residual stream is split by rows
// (tokens) and those become reduce-scatters, with all-gathers before the
// column-parallel linears (again in backward: the gathered inputs are not
// kept). `comm` is the tensor-parallel group; null means tp = 1.
struct TensorParallel {
  Comm* comm = nullptr;
  bool sequence_parallel = false;
  int size() const { return comm != nullptr ? comm->size() : 1; }
  int rank() const { return comm != nullptr ? comm->rank() : 0; }
  bool split_rows() const { return sequence_parallel && size() > 1; }
};

// Context parallelism (Megatron-LM's CP, with its load balancing): each
// rank of the cp group holds 2 of the 2·cp equal chunks of every sequence,
// chunks r and 2·cp − 1 − r, so causal attention costs every rank the same.
// Attention gathers the group's keys and values (all-gather; Megatron-LM
// passes them round a ring, the same bytes) and returns their gradients to
// their owners (reduce-scatter). Everything else is per token: each rank
// runs the whole model on its tokens, and the gradient reduction over
// dp × cp sums the parts. `comm` null means cp = 1.
struct ContextParallel {
  Comm* comm = nullptr;
  int size() const { return comm != nullptr ? comm->size() : 1; }
  int rank() const { return comm != nullptr ? comm->rank() : 0; }
  // The positions rank `rank` of `cp` holds of a sequence of `seq` tokens,
  // ascending.
  static std::vector<std::int32_t> positions(std::int64_t seq, int cp, int rank);
};

// Where a parameter's local elements sit in the whole tensor: rows
// [row_begin, row_end) of it (a vector is one row) and, within each row, the
// column runs `cols` side by side.
struct ParamSlice {
  Shape whole;
  std::int64_t row_begin = 0, row_end = 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> cols;
  bool is_whole() const;
  std::int64_t cols_size() const;  // local columns per row
  Shape local_shape() const;
  // The position in the whole tensor of local element `i`.
  std::int64_t whole_index(std::int64_t i) const;
};

// Activation bytes one microbatch keeps from forward to backward, per layer
// of the op chain (measured from the tensors the step really holds).
struct SavedBytes {
  Bytes embedding = 0;  // token ids
  Bytes block = 0;      // one transformer block (all alike)
  Bytes head = 0;       // final norm input, logits input, fp32 logits
};

// What one microbatch keeps between its forward and backward, per layer of
// the op chain, each tensor named by the op that saves it. The executor will
// hold one set per (layer, microbatch) in flight.
struct EmbeddingSaved {
  IndexTensor tokens;  // embedding: the token ids
  MaskTensor mask;     // embedding_dropout (models with dropout)
  Dropout dropout;     // what the forward used
  Bytes bytes() const { return tokens.bytes() + mask.bytes(); }
};
struct BlockSaved {
  Tensor x;      // attn_norm: its input (the block's input)
  Tensor ln1;    // qkv: its input
  Tensor qkv;    // attn_scores: Q, K; attn_values: V
  Tensor probs;  // softmax: its output (the attention core)
  MaskTensor attn_mask;  // attn_dropout: its mask (attention core)
  Tensor dropped;        // attn_values: the dropout output it multiplied (attention core)
  Tensor attn;   // attn_proj: its input
  MaskTensor proj_mask;  // attn_out_dropout: its mask
  Tensor x1;     // mlp_norm: its input
  Tensor ln2;    // mlp_up: its input
  Tensor up;     // gelu / swiglu: its input
  Tensor act;    // mlp_down: its input
  MaskTensor mlp_mask;   // mlp_dropout: its mask
  Dropout dropout;       // what the forward used (recompute uses it again)
  Bytes bytes() const;
};
struct HeadSaved {
  Tensor x;       // final_norm: its input
  Tensor ln;      // logits: its input
  Tensor logits;  // loss: fp32 logits, turned into their gradient by head_forward
  Bytes bytes() const { return x.bytes() + ln.bytes() + logits.bytes(); }
};
// Activation gradients and scratch alive while a microbatch runs backward.
struct BackwardBuffers {
  Tensor dres;     // gradient of the residual stream, updated layer by layer
  Tensor d_norm;   // gradient of a norm's output
  Tensor d_attn;   // gradient of the attention output
  Tensor d_qkv;    // gradient of the qkv output
  Tensor d_act;    // gradient of the activation's output (GeLU: also its input)
  Tensor d_up;     // gradient of the SwiGLU input (gate | up); empty with GeLU
  Tensor scratch;  // attention backward: seq × seq (Workspace)
  // Sequence parallelism: a whole [tokens × hidden] tensor gathered from the
  // row shards (the output gradient, then a norm's output) and the row shard
  // a reduce-scatter returns.
  Tensor gathered;
  Tensor shard;
};

// Not thread-safe: one thread at a time per model (steps add into the same
// gradients). Separate models on separate threads share nothing.
class GptModel {
 public:
  // Parameters from `spec`, initialised from `seed` (GPT-2: weights
  // N(0, 0.02²), output projections of each block N(0, (0.02/sqrt(2·layers))²),
  // positions N(0, 0.01²), biases 0, norm gains 1). Parameters and
  // gradients come from `alloc` (tags Params, Grads); so does everything a
  // step holds (Activations for saved tensors and activation gradients,
  // Workspace for kernel scratch). kv_heads 0 means heads; ffn_hidden 0
  // means 4·hidden. Throws Error for what it does not implement: dropout,
  // MoE, grouped-query attention, rotary or ALiBi positions.
  // With tensor parallelism (tp.size() > 1) every rank of the group builds
  // its part of the same model: the whole model's initial values, drawn in
  // the same order, of which it keeps its slice (so a tp run starts from the
  // single-rank model's parameters). Dropout is refused with tp > 1; heads,
  // ffn_hidden and vocab must divide by tp, and with sequence parallelism
  // seq_len too. Every rank of the group must call the same steps together.
  //
  // With context parallelism (cp.size() > 1) the model runs on the rank's
  // positions of each sequence: tokens and targets hold batch·seq_len/cp ids
  // (the positions ContextParallel::positions names, sequence after
  // sequence); seq_len must divide by 2·cp; dropout is refused.
  //
  // `keep` (when given) says which parameters, by index into the parameter
  // table (param_table.hpp; names() says which), this model holds: the
  // others get no storage (empty tensors; their initial values are still
  // drawn, so the kept ones equal the whole model's). A pipeline stage keeps
  // its own layers.
  GptModel(const cost::ModelSpec& spec, Allocator& alloc, std::uint64_t seed,
           TensorParallel tp = {}, ContextParallel cp = {},
           const std::function<bool(int)>& keep = {});

  const cost::ModelSpec& spec() const { return spec_; }
  Allocator& allocator() const { return *alloc_; }

  // Parameters and their gradients, in one fixed order (names() says which).
  std::span<Tensor> params() { return params_; }
  std::span<const Tensor> params() const { return params_; }
  std::span<Tensor> grads() { return grads_; }
  std::span<const Tensor> grads() const { return grads_; }
  const std::vector<std::string>& names() const { return table_.names(); }
  // What each parameter is (names, whole shapes, layers, tensor-parallel
  // split, initialisation): the table both backends' models are built from.
  const ParamTable& table() const { return table_; }
  // Which part of the whole parameter `i` this rank holds.
  const ParamSlice& slice(int i) const { return slices_[static_cast<std::size_t>(i)]; }
  // Whether parameter `i` is whole on every tensor-parallel rank but its
  // gradient is only this rank's rows' part (norms and row-parallel biases
  // under sequence parallelism): sum it over the group before the step.
  bool grad_split_by_rows(int i) const;
  const TensorParallel& tensor_parallel() const { return tp_; }
  // Rows of the residual stream a microbatch of `batch` sequences has here
  // (batch·seq_len, divided by cp, and by tp with sequence parallelism).
  std::int64_t rows(std::int64_t batch) const;
  // Tokens of each sequence this rank holds (seq_len / cp) and their
  // positions in the sequence.
  std::int64_t local_seq() const { return seq_; }
  const std::vector<std::int32_t>& positions() const {
    return group_positions_[static_cast<std::size_t>(cp_.rank())];
  }
  std::int64_t parameter_count() const;
  void zero_grads();

  // One forward and backward over `batch` sequences of seq_len tokens
  // (tokens and targets hold batch·seq_len ids, sequence after sequence).
  // Returns the mean cross-entropy over the tokens and ADDS its gradient,
  // times opts.loss_scale, to grads().
  double forward_backward(std::span<const std::int32_t> tokens,
                          std::span<const std::int32_t> targets, std::int64_t batch,
                          const StepOptions& opts = {});
  double forward_backward(std::span<const std::int32_t> tokens,
                          std::span<const std::int32_t> targets, std::int64_t batch,
                          float loss_scale) {
    return forward_backward(tokens, targets, batch, StepOptions{.loss_scale = loss_scale});
  }
  // Mean cross-entropy only; gradients untouched. Without dropout unless
  // `dropout` says otherwise (evaluation).
  double loss(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
              std::int64_t batch, Dropout dropout = {});

  // What the last forward_backward kept for backward (per block: the
  // largest block under its recompute policy).
  const SavedBytes& last_saved_bytes() const { return saved_; }

  // --- per-layer steps, the pieces forward_backward is made of -------------
  // For executors that schedule layers and microbatches themselves. Every
  // tensor comes from allocator(); `batch` is the microbatch's sequences.
  //
  // Embedding: returns the first block's input.
  Tensor embedding_forward(std::span<const std::int32_t> tokens, std::int64_t batch,
                           EmbeddingSaved& saved, Dropout dropout = {});
  // Block `layer`: `input` moves into saved.x; returns the block's output.
  Tensor block_forward(int layer, Tensor input, BlockSaved& saved, Dropout dropout = {});
  // Frees what `policy` does not keep (Selective: the attention core;
  // Full: all but x and the dropout settings).
  static void drop_for_recompute(BlockSaved& saved, cost::Recompute policy);
  // Refills what drop_for_recompute freed, from what it kept.
  void recompute(int layer, BlockSaved& saved);
  // Head: final norm, logits, loss. `input` moves into saved.x. Returns the
  // mean loss; saved.logits becomes the gradient of loss_scale × that mean.
  double head_forward(Tensor input, std::span<const std::int32_t> targets,
                      float loss_scale, HeadSaved& saved);
  // Backward buffers for a microbatch of `batch` sequences.
  BackwardBuffers backward_buffers(std::int64_t batch);
  // Head backward: buffers.dres becomes the gradient of the head's input.
  void head_backward(const HeadSaved& saved, BackwardBuffers& buffers);
  // Block backward: buffers.dres goes from the gradient of the block's
  // output to that of its input. Needs the full saved set (recompute first).
  void block_backward(int layer, const BlockSaved& saved, BackwardBuffers& buffers);
  // Adds the embedding's gradients; consumes buffers.dres.
  void embedding_backward(const EmbeddingSaved& saved, BackwardBuffers& buffers);
  // Context parallelism: one rank's keys and values of a microbatch of
  // `batch` sequences, in floats (the cp ring's largest step).
  std::int64_t kv_elements(std::int64_t batch) const { return batch * seq_ * 2 * attn_width_; }

 private:

  float* p(int i) { return i < 0 ? nullptr : params_[static_cast<std::size_t>(i)].data(); }
  float* g(int i) { return i < 0 ? nullptr : grads_[static_cast<std::size_t>(i)].data(); }
  void check_ids(std::span<const std::int32_t> ids, std::int64_t batch, const char* what) const;
  void check_dropout(const Dropout& d) const;
  void check_activation(const Tensor& t, const char* who) const;
  std::int64_t batch_of(const Tensor& t) const {
    return t.dim(0) * (tp_.split_rows() ? tp_.size() : 1) / seq_;
  }
  // Context parallelism: the K | V rows of every position of the
  // microbatch's sequences, gathered from the group, in position order.
  Tensor gather_kv(const Tensor& qkv, std::int64_t batch);
  // ... and their gradients returned to their owners: the rank's part
  // added into the K and V columns of dqkv.
  void scatter_kv_grads(const Tensor& dkv, float* dqkv, std::int64_t batch);
  // Sequence parallelism: the whole [N × hidden] tensor from this rank's rows.
  void gather_rows(const float* mine, float* whole, std::int64_t N);
  // Row-parallel output: all-reduced in place (whole rows), or reduced and
  // scattered into `mine` (sequence parallelism).
  void reduce_rows(float* whole, float* mine, std::int64_t N);
  // Row-parallel linear: y = x + (in·W summed over the group) + b, into
  // `y` (this rank's rows).
  // Backward: a column-parallel linear's input (or the output gradient) as
  // whole rows: `mine` itself, or gathered into st.gathered.
  const float* whole_rows(const Tensor& mine, BackwardBuffers& st);
  // The column-parallel input gradient in st.d_norm, summed over the group:
  // in place, or reduce-scattered into st.shard (sequence parallelism).
  const float* reduced_rows(BackwardBuffers& st, std::int64_t N);
  void row_parallel_out(const float* in, int w, int bias, const float* x, Tensor& y,
                        std::int64_t N, std::int64_t in_features);

  void norm_forward(int gi, int bi, const float* x, float* y, std::int64_t rows);
  void norm_backward(int gi, int bi, const float* x, const float* dy, float* dx,
                     std::int64_t rows);
  void attention_core(const BlockSaved& s, float* probs, float* out);
  void block_forward_into(int layer, BlockSaved& s, Tensor* out);
  double run(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
             std::int64_t batch, bool backward, const StepOptions& opts);

  cost::ModelSpec spec_;
  Allocator* alloc_;
  TensorParallel tp_;
  ContextParallel cp_;
  std::int64_t seq_ = 0;  // tokens of each sequence here
  std::vector<std::vector<std::int32_t>> group_positions_;  // by cp rank
  // Local widths: heads, hidden of the attention (heads·head_dim), ffn,
  // vocabulary rows, and the first MLP linear's output (ffn for GeLU, 2·ffn
  // for SwiGLU's gate | up).
  std::int64_t heads_ = 0, attn_width_ = 0, ffn_ = 0, vocab_ = 0, vocab_begin_ = 0;
  std::int64_t up_width_ = 0;
  std::vector<Tensor> params_, grads_;
  ParamTable table_;
  std::vector<ParamSlice> slices_;
  std::vector<bool> grad_split_by_rows_;
  int tok_emb_ = -1, pos_emb_ = -1, normf_g_ = -1, normf_b_ = -1, w_logits_ = -1;
  std::vector<BlockIndex> blocks_;
  SavedBytes saved_;
};

}  // namespace strata::backend::cpu
