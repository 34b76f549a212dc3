#pragma once
// Optimizers over device tensors: one fused kernel per parameter tensor,
// the update rules of backend/cpu/optimizer.hpp (SGD, momentum, Adam with L2
// decay, AdamW). States come from the DeviceAllocator under
// MemTag::OptimizerStates, zero, on the first step. Internal to backend/cuda.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

 protected:
  void check(std::span<DeviceTensor> params, std::span<const DeviceTensor> grads) const;
  // Zero states shaped like `params` on the first step.
  static void ensure_state(std::vector<DeviceTensor>& state, std::span<DeviceTensor> params,
                           DeviceAllocator& alloc);
  std::int64_t t_ = 0;  // steps taken
};

// Why the CUDA backend has no kernels for this optimizer, or nothing.
std::optional<std::string> unsupported_optimizer(strategies::Optimizer o);
// Throws Error for an unsupported optimizer.
std::unique_ptr<Optimizer> make_optimizer(strategies::Optimizer o, float lr, float weight_decay,
                                          DeviceAllocator& alloc);

}  // namespace strata::backend::cuda
