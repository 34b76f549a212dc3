#pragma once
// Optimizers over lists of parameter tensors and their gradients. Each keeps
// its state (momentum, Adam moments) in tensors from an Allocator under
// MemTag::OptimizerStates, created on the first step, one per parameter.
// Update rules follow PyTorch's torch.optim (SGD, SGD with momentum
// and dampening 0, Adam with L2 weight decay, AdamW with decoupled decay).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/allocator.hpp"
#include "backend/cpu/tensor.hpp"

namespace strata::backend::cpu {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every params[i] from grads[i] (same shapes). Throws Error
  // when the lists disagree with each other or with the first step's.
  virtual void step(std::span<Tensor> params, std::span<const Tensor> grads) = 0;
  std::int64_t steps() const { return t_; }

 protected:
  void check(std::span<Tensor> params, std::span<const Tensor> grads) const;
  std::int64_t t_ = 0;  // steps taken
};

struct SgdOptions {
  float lr = 1e-2f;
  float momentum = 0.0f;      // 0: plain SGD
  float weight_decay = 0.0f;  // L2: g += wd·p
};

// p −= lr·g, or with momentum: v = μ·v + g; p −= lr·v (v₁ = g₁).
class Sgd final : public Optimizer {
 public:
  Sgd(Allocator& alloc, SgdOptions o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  SgdOptions o_;
  std::vector<Tensor> velocity_;
};

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // true: AdamW (p −= lr·wd·p), false: Adam (g += wd·p)
};

// m = β₁m + (1−β₁)g; v = β₂v + (1−β₂)g²; p −= lr·m̂/(sqrt(v̂) + eps) with
// m̂ = m/(1−β₁ᵗ), v̂ = v/(1−β₂ᵗ).
class Adam final : public Optimizer {
 public:
  Adam(Allocator& alloc, AdamOptions o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  AdamOptions o_;
  std::vector<Tensor> m_, v_;
};

}  // namespace strata::backend::cpu
