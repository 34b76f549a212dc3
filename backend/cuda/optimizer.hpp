#pragma once
// Optimizers over device tensors with the update rules, state layouts and
// state bytes of backend/cpu/optimizer.hpp: SGD, momentum, Adam with L2
// decay, AdamW (one fused kernel per parameter tensor, kernels.cu), 8-bit
// Adam, LARS, LAMB, Adafactor and SM3 (optimizer_kernels.cu, their arithmetic
// in optimizer_math.hpp; the trust ratios' norms reduced on the device).
// States come from the DeviceAllocator under MemTag::OptimizerStates, on the
// first step; scratch under MemTag::Workspace for the step. Internal to
// backend/cuda.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/common/optimizer_options.hpp"
#include "backend/cuda/tensor.hpp"
#include "strategies/plan.hpp"

namespace strata::backend::cuda {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every params[i] from grads[i], enqueued on `stream`; no
  // update at all when *skip != 0 on the device (skip may be null).
  virtual void step(cudaStream_t stream, std::span<DeviceTensor> params,
                    std::span<const DeviceTensor> grads, const int* skip) = 0;
  // Every state tensor's bytes, copied to the host, in the order the CPU
  // optimizer of the same rule allocates its states (tests compare them).
  virtual std::vector<std::vector<std::uint8_t>> download_states() const = 0;
  std::int64_t steps() const { return t_; }

 protected:
  void check(std::span<DeviceTensor> params, std::span<const DeviceTensor> grads) const;
  // Zero states shaped like `params` on the first step.
  static void ensure_state(std::vector<DeviceTensor>& state, std::span<DeviceTensor> params,
                           DeviceAllocator& alloc);
  std::int64_t t_ = 0;  // steps taken
};

// The rules beyond Adam, with the CPU optimizers' options (and defaults).
std::unique_ptr<Optimizer> make_adam8bit(DeviceAllocator& alloc, const Adam8bitOptions& o);
std::unique_ptr<Optimizer> make_lars(DeviceAllocator& alloc, const LarsOptions& o);
std::unique_ptr<Optimizer> make_lamb(DeviceAllocator& alloc, const LambOptions& o);
std::unique_ptr<Optimizer> make_adafactor(DeviceAllocator& alloc, const AdafactorOptions& o);
std::unique_ptr<Optimizer> make_sm3(DeviceAllocator& alloc, const Sm3Options& o);

// Why the CUDA backend has no kernels for this optimizer, or nothing.
std::optional<std::string> unsupported_optimizer(strategies::Optimizer o);
// Throws Error for an unsupported optimizer. lr and weight_decay as the CPU
// executor passes them (Adafactor and SM3 take no weight decay).
std::unique_ptr<Optimizer> make_optimizer(strategies::Optimizer o, float lr, float weight_decay,
                                          DeviceAllocator& alloc);

}  // namespace strata::backend::cuda
