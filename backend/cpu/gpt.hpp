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
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/tensor.hpp"
#include "costmodel/model.hpp"

namespace strata::backend::cpu {

// Activation bytes one microbatch keeps from forward to backward, per layer
// of the op chain (measured from the tensors the step really holds).
struct SavedBytes {
  Bytes embedding = 0;  // token ids
  Bytes block = 0;      // one transformer block (all alike)
  Bytes head = 0;       // final norm input, logits input, fp32 logits
};

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
  GptModel(const cost::ModelSpec& spec, Allocator& alloc, std::uint64_t seed);

  const cost::ModelSpec& spec() const { return spec_; }
  Allocator& allocator() const { return *alloc_; }

  // Parameters and their gradients, in one fixed order (names() says which).
  std::span<Tensor> params() { return params_; }
  std::span<const Tensor> params() const { return params_; }
  std::span<Tensor> grads() { return grads_; }
  std::span<const Tensor> grads() const { return grads_; }
  const std::vector<std::string>& names() const { return names_; }
  std::int64_t parameter_count() const;
  void zero_grads();

  // One forward and backward over `batch` sequences of seq_len tokens
  // (tokens and targets hold batch·seq_len ids, sequence after sequence).
  // Returns the mean cross-entropy over the tokens, and ADDS the gradient of
  // loss_scale × that mean to grads() (loss_scale = 1/k over k
  // microbatches gives the mean over all of them).
  double forward_backward(std::span<const std::int32_t> tokens,
                          std::span<const std::int32_t> targets, std::int64_t batch,
                          float loss_scale = 1.0f);
  // Mean cross-entropy only; gradients untouched.
  double loss(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
              std::int64_t batch);

  // What the last forward kept for backward.
  const SavedBytes& last_saved_bytes() const { return saved_; }

 private:
  struct BlockIndex {  // positions in params_; -1 when absent (no bias, RMS norm)
    int norm1_g = -1, norm1_b = -1, w_qkv = -1, b_qkv = -1, w_proj = -1, b_proj = -1;
    int norm2_g = -1, norm2_b = -1, w_up = -1, b_up = -1, w_down = -1, b_down = -1;
  };
  struct BlockSaved;
  struct StepState;

  int add_param(const std::string& name, Shape shape);
  float* p(int i) { return i < 0 ? nullptr : params_[static_cast<std::size_t>(i)].data(); }
  float* g(int i) { return i < 0 ? nullptr : grads_[static_cast<std::size_t>(i)].data(); }
  void norm_forward(int gi, int bi, const float* x, float* y, std::int64_t rows);
  void norm_backward(int gi, int bi, const float* x, const float* dy, float* dx,
                     std::int64_t rows);
  double run(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets,
             std::int64_t batch, bool backward, float loss_scale);
  void block_forward(int layer, BlockSaved& s, Tensor& out, std::int64_t batch);
  void block_backward(int layer, const BlockSaved& s, StepState& st, std::int64_t batch);

  cost::ModelSpec spec_;
  Allocator* alloc_;
  std::int64_t up_width_ = 0;  // ffn (GeLU) or 2·ffn (SwiGLU gate | up)
  std::vector<Tensor> params_, grads_;
  std::vector<std::string> names_;
  int tok_emb_ = -1, pos_emb_ = -1, normf_g_ = -1, normf_b_ = -1, w_logits_ = -1;
  std::vector<BlockIndex> blocks_;
  SavedBytes saved_;
};

}  // namespace strata::backend::cpu
