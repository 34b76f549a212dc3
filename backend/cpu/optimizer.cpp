#include "backend/cpu/optimizer.hpp"

#include <cmath>
#include <string>

#include "sim/error.hpp"

namespace strata::backend::cpu {

void Optimizer::check(std::span<Tensor> params, std::span<const Tensor> grads) const {
  if (params.size() != grads.size())
    throw Error("optimizer: " + std::to_string(params.size()) + " parameters but " +
                std::to_string(grads.size()) + " gradients");
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!(params[i].shape() == grads[i].shape()))
      throw Error("optimizer: parameter " + std::to_string(i) + " has shape " +
                  params[i].shape().str() + " but its gradient " + grads[i].shape().str());
}

namespace {
// State tensors shaped like the parameters, made on the first step.
void ensure_state(std::vector<Tensor>& state, std::span<Tensor> params, Allocator& alloc) {
  if (state.empty()) {
    state.reserve(params.size());
    for (const auto& p : params) state.emplace_back(alloc, p.shape(), MemTag::OptimizerStates);
    return;
  }
  if (state.size() != params.size())
    throw Error("optimizer: stepped with " + std::to_string(params.size()) +
                " parameters after " + std::to_string(state.size()));
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!(state[i].shape() == params[i].shape()))
      throw Error("optimizer: parameter " + std::to_string(i) + " changed shape");
}
}  // namespace

void Sgd::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  const bool mom = o_.momentum != 0.0f;
  if (mom) ensure_state(velocity_, params, *alloc_);
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    const std::int64_t n = params[i].numel();
    if (!mom) {
      for (std::int64_t j = 0; j < n; ++j) p[j] -= o_.lr * (g[j] + o_.weight_decay * p[j]);
      continue;
    }
    float* v = velocity_[i].data();
    for (std::int64_t j = 0; j < n; ++j) {
      const float d = g[j] + o_.weight_decay * p[j];
      v[j] = t_ == 0 ? d : o_.momentum * v[j] + d;
      p[j] -= o_.lr * v[j];
    }
  }
  ++t_;
}

void Adam::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  ensure_state(m_, params, *alloc_);
  ensure_state(v_, params, *alloc_);
  ++t_;
  const double bc1 = 1.0 - std::pow(static_cast<double>(o_.beta1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o_.beta2), static_cast<double>(t_));
  // p −= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps), PyTorch's arrangement.
  const auto step_size = static_cast<float>(o_.lr / bc1);
  const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const std::int64_t n = params[i].numel();
    for (std::int64_t j = 0; j < n; ++j) {
      float d = g[j];
      if (o_.decoupled)
        p[j] -= o_.lr * o_.weight_decay * p[j];
      else
        d += o_.weight_decay * p[j];
      m[j] = o_.beta1 * m[j] + (1.0f - o_.beta1) * d;
      v[j] = o_.beta2 * v[j] + (1.0f - o_.beta2) * d * d;
      p[j] -= step_size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bc2 + o_.eps);
    }
  }
}

}  // namespace strata::backend::cpu
