#pragma once
// The GPT training step on one GPU: backend/cpu/gpt.hpp's GptModel (its op
// chain, parameter names, order and shapes, per-layer steps and what each
// layer keeps for backward), with every tensor in device memory and every op
// enqueued on one stream. fp32 storage and arithmetic, standard attention;
// no tensor or context parallelism and no dropout (refused). Internal to
// backend/cuda (cuda::Executor runs it; tests compare it with the CPU model).
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/gpt.hpp"
#include "backend/cuda/ops.hpp"
#include "backend/cuda/tensor.hpp"
#include "costmodel/model.hpp"
#include "costmodel/techniques.hpp"

namespace strata::backend::cuda {

struct EmbeddingSaved {
  DeviceIndexTensor tokens;  // embedding: the token ids
  Bytes bytes() const { return tokens.bytes(); }
};
struct BlockSaved {
  DeviceTensor x;      // attn_norm: its input (the block's input)
  DeviceTensor ln1;    // qkv: its input
  DeviceTensor qkv;    // attn_scores: Q, K; attn_values: V
  DeviceTensor probs;  // softmax: its output (the attention core)
  DeviceTensor attn;   // attn_proj: its input
  DeviceTensor x1;     // mlp_norm: its input
  DeviceTensor ln2;    // mlp_up: its input
  DeviceTensor up;     // gelu / swiglu: its input
  DeviceTensor act;    // mlp_down: its input
  // Every member, in a fixed order (offload moves them one by one).
  std::array<DeviceTensor*, 9> tensors() { return {&x, &ln1, &qkv, &probs, &attn, &x1, &ln2, &up, &act}; }
  Bytes bytes() const;
};
struct HeadSaved {
  DeviceTensor x;       // final_norm: its input
  DeviceTensor ln;      // logits: its input
  DeviceTensor logits;  // loss: fp32 logits, turned into their gradient by head_forward
};
struct BackwardBuffers {
  DeviceTensor dres, d_norm, d_attn, d_qkv, d_act, d_up;  // as the CPU model's (Activations)
  DeviceTensor scratch;  // attention backward: scratch_heads() seq × seq matrices (Workspace)
  DeviceTensor stats;    // a norm's per-row statistics, 2 floats a row (Workspace)
};

class GptModel {
 public:
  // Parameters as cpu::GptModel names and shapes them, initialised on the
  // device from `seed` with GPT-2's scheme (weights N(0, 0.02²), the blocks'
  // output projections N(0, (0.02/sqrt(2·layers))²), positions N(0, 0.01²),
  // biases 0, gains 1) by a counter-based generator: not the CPU model's
  // values (set_parameters copies those in). Every op runs on ctx.stream.
  // Throws Error for what it does not implement (dropout, MoE, grouped-query
  // attention, rotary or ALiBi positions).
  GptModel(const cost::ModelSpec& spec, DeviceAllocator& alloc, Ctx ctx, std::uint64_t seed);

  const cost::ModelSpec& spec() const { return spec_; }
  const Ctx& ctx() const { return ctx_; }
  std::span<DeviceTensor> params() { return params_; }
  std::span<DeviceTensor> grads() { return grads_; }
  const std::vector<std::string>& names() const { return names_; }
  std::int64_t parameter_count() const;
  std::int64_t rows(std::int64_t batch) const { return batch * spec_.seq_len; }
  void zero_grads();
  // Heads processed at once by the attention backward (its scratch holds
  // that many seq × seq matrices, at most 64 MiB unless one head needs more).
  std::int64_t scratch_heads() const;

  // Copies host values into parameter `i` (same element count; synchronous).
  void set_parameter(int i, std::span<const float> values);

  // --- per-layer steps (cpu::GptModel's, on device pointers) -----------------
  // tokens: batch·seq_len device ids already checked to lie in [0, vocab).
  DeviceTensor embedding_forward(const std::int32_t* tokens, std::int64_t batch, EmbeddingSaved& saved);
  DeviceTensor block_forward(int layer, DeviceTensor input, BlockSaved& saved);
  static void drop_for_recompute(BlockSaved& saved, cost::Recompute policy);
  void recompute(int layer, BlockSaved& saved);
  // Adds the microbatch's mean loss to *loss (device, double); saved.logits
  // becomes the gradient of loss_scale × that mean. targets: device ids in [0, vocab).
  void head_forward(DeviceTensor input, const std::int32_t* targets, float loss_scale,
                    HeadSaved& saved, double* loss);
  BackwardBuffers backward_buffers(std::int64_t batch);
  void head_backward(const HeadSaved& saved, BackwardBuffers& buffers);
  void block_backward(int layer, const BlockSaved& saved, BackwardBuffers& buffers);
  void embedding_backward(const EmbeddingSaved& saved, BackwardBuffers& buffers);

  // One forward and backward from host ids (checked here), as
  // cpu::GptModel::forward_backward: returns the mean loss (synchronising)
  // and adds its gradient × opts.loss_scale. Dropout is refused.
  double forward_backward(std::span<const std::int32_t> tokens,
                          std::span<const std::int32_t> targets, std::int64_t batch,
                          const cpu::StepOptions& opts = {});

 private:
  struct BlockIndex {  // positions in params_; -1 when absent
    int norm1_g = -1, norm1_b = -1, w_qkv = -1, b_qkv = -1, w_proj = -1, b_proj = -1;
    int norm2_g = -1, norm2_b = -1, w_up = -1, b_up = -1, w_down = -1, b_down = -1;
  };
  int add_param(const std::string& name, Shape shape);
  float* p(int i) { return i < 0 ? nullptr : params_[static_cast<std::size_t>(i)].data(); }
  float* g(int i) { return i < 0 ? nullptr : grads_[static_cast<std::size_t>(i)].data(); }
  std::int64_t batch_of(const DeviceTensor& t) const { return t.dim(0) / spec_.seq_len; }
  void check_activation(const DeviceTensor& t, const char* who) const;
  void norm_forward(int gi, int bi, const float* x, float* y, std::int64_t rows);
  void norm_backward(int gi, int bi, const float* x, const float* dy, float* dx, float* stats,
                     std::int64_t rows);
  void block_forward_into(int layer, BlockSaved& s, DeviceTensor* out);

  cost::ModelSpec spec_;
  DeviceAllocator* alloc_;
  Ctx ctx_;
  std::int64_t up_width_ = 0;
  std::vector<DeviceTensor> params_, grads_;
  std::vector<std::string> names_;
  int tok_emb_ = -1, pos_emb_ = -1, normf_g_ = -1, normf_b_ = -1, w_logits_ = -1;
  std::vector<BlockIndex> blocks_;
};

// Token or target ids outside [0, vocab) throw Error naming the first one.
void check_ids(std::span<const std::int32_t> ids, std::int64_t vocab, const char* what);

}  // namespace strata::backend::cuda
