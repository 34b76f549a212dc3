#include "backend/cuda/optimizer.hpp"

#include <cmath>

#include "backend/cuda/kernels.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

void Optimizer::check(std::span<DeviceTensor> params, std::span<const DeviceTensor> grads) const {
  if (params.size() != grads.size())
    throw Error("optimizer: " + std::to_string(params.size()) + " parameters but " +
                std::to_string(grads.size()) + " gradients");
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!(params[i].shape() == grads[i].shape()))
      throw Error("optimizer: parameter " + std::to_string(i) + " is " + params[i].shape().str() +
                  " but its gradient " + grads[i].shape().str());
}

void Optimizer::ensure_state(std::vector<DeviceTensor>& state, std::span<DeviceTensor> params,
                             DeviceAllocator& alloc) {
  if (!state.empty()) {
    if (state.size() != params.size())
      throw Error("optimizer: stepped with " + std::to_string(params.size()) + " parameters after " +
                  std::to_string(state.size()));
    return;
  }
  for (const auto& p : params) state.emplace_back(alloc, p.shape(), MemTag::OptimizerStates);
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(DeviceAllocator& a, float lr, float momentum, float wd) : alloc_(&a), lr_(lr), momentum_(momentum), wd_(wd) {}
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    const bool mom = momentum_ != 0.0f;
    if (mom) ensure_state(velocity_, params, *alloc_);
    for (std::size_t i = 0; i < params.size(); ++i)
      kernels::sgd_step(s, params[i].data(), grads[i].data(), mom ? velocity_[i].data() : nullptr,
                        params[i].numel(), lr_, momentum_, wd_, t_ == 0, skip);
    ++t_;
  }

 private:
  DeviceAllocator* alloc_;
  float lr_, momentum_, wd_;
  std::vector<DeviceTensor> velocity_;
};

class Adam final : public Optimizer {
 public:
  Adam(DeviceAllocator& a, float lr, float wd, bool decoupled) : alloc_(&a) {
    a_.lr = lr;
    a_.weight_decay = wd;
    a_.decoupled = decoupled;
  }
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    ensure_state(m_, params, *alloc_);
    ensure_state(v_, params, *alloc_);
    // The step count advances on the host even when the device skips the
    // update: a skipped step ends the run (the executor reports it).
    ++t_;
    const double bc1 = 1.0 - std::pow(static_cast<double>(a_.beta1), static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(static_cast<double>(a_.beta2), static_cast<double>(t_));
    kernels::AdamStep a = a_;
    a.step_size = static_cast<float>(a_.lr / bc1);
    a.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    for (std::size_t i = 0; i < params.size(); ++i)
      kernels::adam_step(s, params[i].data(), grads[i].data(), m_[i].data(), v_[i].data(),
                         params[i].numel(), a, skip);
  }

 private:
  DeviceAllocator* alloc_;
  kernels::AdamStep a_;
  std::vector<DeviceTensor> m_, v_;
};

}  // namespace

std::optional<std::string> unsupported_optimizer(strategies::Optimizer o) {
  using strategies::Optimizer;
  switch (o) {
    case Optimizer::Sgd:
    case Optimizer::Momentum:
    case Optimizer::Adam:
    case Optimizer::AdamW: return std::nullopt;
    default: break;
  }
  return "the " + std::string(enum_name(o)) +
         " optimizer has no CUDA kernels yet (the CUDA backend steps sgd, momentum, adam and adamw)";
}

std::unique_ptr<Optimizer> make_optimizer(strategies::Optimizer o, float lr, float weight_decay,
                                          DeviceAllocator& alloc) {
  if (auto why = unsupported_optimizer(o)) throw Error("optimizer: " + *why);
  using strategies::Optimizer;
  switch (o) {
    case Optimizer::Sgd: return std::make_unique<Sgd>(alloc, lr, 0.0f, weight_decay);
    case Optimizer::Momentum: return std::make_unique<Sgd>(alloc, lr, 0.9f, weight_decay);
    case Optimizer::Adam: return std::make_unique<Adam>(alloc, lr, weight_decay, false);
    default: return std::make_unique<Adam>(alloc, lr, weight_decay, true);
  }
}

}  // namespace strata::backend::cuda
