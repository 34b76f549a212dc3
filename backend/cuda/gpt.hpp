#pragma once
// The GPT training step on one GPU: backend/cpu/gpt.hpp's GptModel (its op
// chain, parameter names, order and shapes, per-layer steps and what each
// layer keeps for backward), with every tensor in device memory and every op
// enqueued on one stream. Standard attention; no tensor or context
// parallelism and no dropout (refused). Internal to backend/cuda
// (cuda::Executor runs it; tests compare it with the CPU model).
//
// Precision. fp32: every tensor fp32. bf16 (mixed precision as Megatron-LM
// and the memory model define it, docs/memory-model.md): bf16 working
// weights (MemTag::Params, 2 bytes a parameter), fp32 master weights
// (MemTag::OptimizerStates, 4 bytes: the memory model counts them with the
// optimizer's states), fp32 gradients (MemTag::Grads, 4 bytes: fp32
// accumulation), bf16 activations, fp32 logits for the loss. Products are
// bf16 with fp32 accumulation, the kernels compute in fp32 and store bf16.
// params() are the fp32 values in both: the optimizer steps them, and
// refresh_working() casts them to the bf16 copy the step computes with.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/common/param_table.hpp"
#include "backend/common/step_options.hpp"
#include "backend/cuda/act_tensor.hpp"
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
  // In the model's activation type (fp32 or bf16).
  ActTensor x;      // attn_norm: its input (the block's input)
  ActTensor ln1;    // qkv: its input
  ActTensor qkv;    // attn_scores: Q, K; attn_values: V
  ActTensor probs;  // softmax: its output (the attention core)
  ActTensor attn;   // attn_proj: its input
  ActTensor x1;     // mlp_norm: its input
  ActTensor ln2;    // mlp_up: its input
  ActTensor up;     // gelu / swiglu: its input
  ActTensor act;    // mlp_down: its input
  // Every member, in a fixed order (offload moves them one by one).
  std::array<ActTensor*, 9> tensors() { return {&x, &ln1, &qkv, &probs, &attn, &x1, &ln2, &up, &act}; }
  Bytes bytes() const;
};
struct HeadSaved {
  ActTensor x;       // final_norm: its input (activation type)
  ActTensor ln;      // logits: its input (activation type)
  ActTensor logits;  // loss: fp32 logits in both precisions, turned into their gradient by head_forward
};
struct BackwardBuffers {
  // Activation type.
  ActTensor dres, d_norm, d_attn, d_qkv, d_act, d_up;  // as the CPU model's (Activations)
  ActTensor scratch;   // attention backward: scratch_heads() seq × seq matrices (Workspace)
  DeviceTensor stats;  // a norm's per-row statistics, 2 floats a row (Workspace)
};

class GptModel {
 public:
  // Parameters as the parameter table (param_table.hpp) names, orders and
  // shapes them, as for cpu::GptModel, initialised on the device from
  // `seed` with the table's GPT-2 scheme by a counter-based generator: not the CPU model's
  // values (set_parameters copies those in). Every op runs on ctx.stream.
  // Throws Error for what it does not implement (dropout, MoE, grouped-query
  // attention, rotary or ALiBi positions) and for a precision other than
  // fp32 and bf16. In bf16 the working copy is cast from the fp32 values.
  GptModel(const cost::ModelSpec& spec, DeviceAllocator& alloc, Ctx ctx, std::uint64_t seed,
           cost::Precision precision = cost::Precision::FP32);

  const cost::ModelSpec& spec() const { return spec_; }
  const Ctx& ctx() const { return ctx_; }
  cost::Precision precision() const { return bf16_ ? cost::Precision::BF16 : cost::Precision::FP32; }
  // The activations' element type (BlockSaved, BackwardBuffers, the
  // activations passed between layers).
  DType dtype() const { return bf16_ ? DType::BF16 : DType::F32; }
  // The fp32 parameter values: the weights (fp32), the master weights (bf16).
  std::span<DeviceTensor> params() { return params_; }
  std::span<DeviceTensor> grads() { return grads_; }
  const std::vector<std::string>& names() const { return table_.names(); }
  const ParamTable& table() const { return table_; }
  std::int64_t parameter_count() const;
  std::int64_t rows(std::int64_t batch) const { return batch * spec_.seq_len; }
  void zero_grads();
  // Heads processed at once by the attention backward (its scratch holds
  // that many seq × seq matrices, at most 64 MiB unless one head needs more).
  std::int64_t scratch_heads() const;

  // Copies host values into parameter `i` (same element count; synchronous;
  // in bf16 the working copy is cast from them).
  void set_parameter(int i, std::span<const float> values);
  // bf16: the working weights := bf16(master weights), one cast kernel per
  // tensor, after each optimizer step. fp32: nothing to do.
  void refresh_working();

  // --- per-layer steps (cpu::GptModel's, on device pointers) -----------------
  // tokens: batch·seq_len device ids already checked to lie in [0, vocab).
  ActTensor embedding_forward(const std::int32_t* tokens, std::int64_t batch, EmbeddingSaved& saved);
  ActTensor block_forward(int layer, ActTensor input, BlockSaved& saved);
  static void drop_for_recompute(BlockSaved& saved, cost::Recompute policy);
  void recompute(int layer, BlockSaved& saved);
  // Adds the microbatch's mean loss to *loss (device, double); saved.logits
  // becomes the gradient of loss_scale × that mean. targets: device ids in [0, vocab).
  void head_forward(ActTensor input, const std::int32_t* targets, float loss_scale,
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
                          const StepOptions& opts = {});

 private:
  void add_param(Shape shape);
  float* p(int i) { return i < 0 ? nullptr : params_[static_cast<std::size_t>(i)].data(); }
  float* g(int i) { return i < 0 ? nullptr : grads_[static_cast<std::size_t>(i)].data(); }
  // The weights the step computes with: p(i) in fp32, the bf16 copy in bf16.
  template <class T>
  T* w(int i);
  // Runs f(float{}) or f(Bf16{}) by the model's precision.
  template <class F>
  void typed(F&& f) {
    if (bf16_)
      f(Bf16{});
    else
      f(0.0f);
  }
  std::int64_t batch_of(const ActTensor& t) const { return t.dim(0) / spec_.seq_len; }
  void check_activation(const ActTensor& t, const char* who) const;
  template <class T>
  void norm_forward(int gi, int bi, const T* x, T* y, std::int64_t rows);
  template <class T>
  void norm_backward(int gi, int bi, const T* x, const T* dy, T* dx, float* stats, std::int64_t rows);
  template <class T>
  void block_forward_into(int layer, BlockSaved& s, ActTensor* out);
  template <class T>
  void head_backward_impl(const HeadSaved& saved, BackwardBuffers& buffers);
  template <class T>
  void block_backward_impl(int layer, const BlockSaved& saved, BackwardBuffers& buffers);

  cost::ModelSpec spec_;
  DeviceAllocator* alloc_;
  Ctx ctx_;
  std::int64_t up_width_ = 0;
  bool bf16_ = false;
  std::vector<DeviceTensor> params_, grads_;
  std::vector<BasicDeviceTensor<Bf16>> work_;  // bf16: the working weights (MemTag::Params)
  ParamTable table_;
  int tok_emb_ = -1, pos_emb_ = -1, normf_g_ = -1, normf_b_ = -1, w_logits_ = -1;
  std::vector<BlockIndex> blocks_;
};

// Token or target ids outside [0, vocab) throw Error naming the first one.
void check_ids(std::span<const std::int32_t> ids, std::int64_t vocab, const char* what);

}  // namespace strata::backend::cuda
