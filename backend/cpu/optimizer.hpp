#pragma once
// Optimizers over lists of parameter tensors and their gradients. Each keeps
// its state (momentum, Adam moments) in tensors from an Allocator under
// MemTag::OptimizerStates, created on the first step, one per parameter.
// Update rules follow PyTorch's torch.optim (SGD, SGD with momentum
// and dampening 0, Adam with L2 weight decay, AdamW with decoupled decay)
// and the papers for LARS, LAMB, Adafactor and SM3. State bytes per
// parameter are strategies::bytes_per_param's (fp32 training), and for the
// factored ones strategies::factored_state_bytes's: 4·(m + n) per m × n
// matrix, 4 per vector entry.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/common/optimizer_options.hpp"
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

// 8-bit Adam (Dettmers et al. 2022, block-wise): m and v are stored as one
// byte each, indices into the dynamic-tree quantization map (signed for m,
// unsigned for v; 256 values each, as bitsandbytes' create_dynamic_map),
// scaled by one fp32 absmax per block of `block` elements and moment. A step
// dequantizes a block, runs AdamW in fp32 on it, and requantizes each moment
// to the nearest map value after dividing by the block's new absmax. Every
// tensor is quantized, whatever its size. State bytes: 2 + 8/block per
// parameter (the last block of a tensor may be short).
class Adam8bit final : public Optimizer {
 public:
  Adam8bit(Allocator& alloc, Adam8bitOptions o);
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;
  // The quantization maps, ascending, from −1 (signed) or 0 to 1.
  const std::array<float, 256>& signed_map() const { return signed_; }
  const std::array<float, 256>& unsigned_map() const { return unsigned_; }

 private:
  Allocator* alloc_;
  Adam8bitOptions o_;
  std::array<float, 256> signed_{}, unsigned_{};
  std::vector<MaskTensor> m_, v_;   // codes
  std::vector<Tensor> m_max_, v_max_;  // absmax per block
};

// LARS (You et al. 2017, Algorithm 1), per parameter tensor:
// trust = η·‖w‖/(‖g‖ + wd·‖w‖) (1 when either norm is 0);
// v = μ·v + lr·trust·(g + wd·w); w −= v.
class Lars final : public Optimizer {
 public:
  Lars(Allocator& alloc, LarsOptions o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  LarsOptions o_;
  std::vector<Tensor> velocity_;
};

// LAMB (You et al. 2019, Algorithm 2 with bias correction), per tensor:
// Adam's m, v, m̂, v̂; u = m̂/(sqrt(v̂) + eps) + wd·w;
// w −= lr·(‖w‖/‖u‖)·u (ratio 1 when either norm is 0).
class Lamb final : public Optimizer {
 public:
  Lamb(Allocator& alloc, LambOptions o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  LambOptions o_;
  std::vector<Tensor> m_, v_;
};

// Adafactor (Shazeer & Stern 2018, Algorithm 4 with β₁ = 0 and a fixed
// step size): for an m × n matrix, row sums R and column sums C of
// g² + ε₁ decay at β̂₂ₜ and V̂ = R·Cᵀ/ΣR; other tensors keep a full V.
// U = g/sqrt(V̂); w −= lr·U/max(1, RMS(U)/d).
class Adafactor final : public Optimizer {
 public:
  Adafactor(Allocator& alloc, AdafactorOptions o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  AdafactorOptions o_;
  std::vector<Tensor> row_, col_;  // matrices: R and C; others: V in row_, col_ empty
};

// SM3-II (Anil et al. 2019) with row and column covers for an m × n matrix:
// ν_ij = min(r_i, c_j) + g_ij²; r_i = max_j ν_ij; c_j = max_i ν_ij;
// w −= lr·g/sqrt(ν) (0 where ν = 0). Other tensors: Adagrad, ν += g².
class Sm3 final : public Optimizer {
 public:
  Sm3(Allocator& alloc, Sm3Options o) : alloc_(&alloc), o_(o) {}
  void step(std::span<Tensor> params, std::span<const Tensor> grads) override;

 private:
  Allocator* alloc_;
  Sm3Options o_;
  std::vector<Tensor> row_, col_;
};

}  // namespace strata::backend::cpu
