#include "backend/cuda/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "backend/common/capabilities.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/optimizer_kernels.hpp"
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

template <class T>
void append_bytes(std::vector<std::vector<std::uint8_t>>& out, const BasicDeviceTensor<T>& t) {
  if (t.empty()) return;
  const std::vector<T> host = t.download();
  std::vector<std::uint8_t> bytes(host.size() * sizeof(T));
  std::memcpy(bytes.data(), host.data(), bytes.size());
  out.push_back(std::move(bytes));
}

template <class T>
void append_all(std::vector<std::vector<std::uint8_t>>& out, const std::vector<BasicDeviceTensor<T>>& ts) {
  for (const auto& t : ts) append_bytes(out, t);
}

// Every tensor of each state in turn (all of m, then all of v).
template <class... States>
std::vector<std::vector<std::uint8_t>> download_each(const States&... states) {
  std::vector<std::vector<std::uint8_t>> out;
  (append_all(out, states), ...);
  return out;
}
// The states interleaved per parameter (m[0], v[0], m[1], v[1], …), all of
// the same length.
template <class... States>
std::vector<std::vector<std::uint8_t>> download_by_parameter(const States&... states) {
  std::vector<std::vector<std::uint8_t>> out;
  const std::size_t n = std::get<0>(std::tie(states...)).size();
  for (std::size_t i = 0; i < n; ++i) (append_bytes(out, states[i]), ...);
  return out;
}

// Factored state, as the CPU's: a rank-2 parameter gets [rows] and [cols]
// tensors, any other a full tensor in `row` and nothing in `col`.
void ensure_factored(std::vector<DeviceTensor>& row, std::vector<DeviceTensor>& col,
                     std::span<DeviceTensor> params, DeviceAllocator& alloc) {
  if (!row.empty()) {
    if (row.size() != params.size())
      throw Error("optimizer: stepped with " + std::to_string(params.size()) + " parameters after " +
                  std::to_string(row.size()));
    return;
  }
  for (const auto& p : params) {
    if (p.shape().rank() == 2) {
      row.emplace_back(alloc, Shape{p.dim(0)}, MemTag::OptimizerStates);
      col.emplace_back(alloc, Shape{p.dim(1)}, MemTag::OptimizerStates);
    } else {
      row.emplace_back(alloc, p.shape(), MemTag::OptimizerStates);
      col.emplace_back();
    }
  }
}

// Scratch doubles for the norms' reductions, for this step (released on the
// allocator's stream after the step's kernels).
BasicDeviceTensor<double> norm_scratch(DeviceAllocator& alloc) {
  return BasicDeviceTensor<double>(alloc, Shape{kernels::kOptimizerScratch}, MemTag::Workspace,
                                   Fill::Uninitialised);
}

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
  std::vector<std::vector<std::uint8_t>> download_states() const override { return download_each(velocity_); }

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
  std::vector<std::vector<std::uint8_t>> download_states() const override { return download_each(m_, v_); }

 private:
  DeviceAllocator* alloc_;
  kernels::AdamStep a_;
  std::vector<DeviceTensor> m_, v_;
};

// 8-bit Adam: per parameter, codes m and v (one byte per element, starting at
// each map's code of 0) and the absmax of m and v per block: the CPU's
// 2 + 8/block bytes per parameter.
class Adam8bit final : public Optimizer {
 public:
  Adam8bit(DeviceAllocator& a, const Adam8bitOptions& o) : alloc_(&a), o_(o), maps_(math::quant_maps()) {
    if (o.block < 1) throw Error("Adam8bit: block must be >= 1");
    a_.lr = o.lr;
    a_.beta1 = o.beta1;
    a_.beta2 = o.beta2;
    a_.eps = o.eps;
    a_.weight_decay = o.weight_decay;
  }
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    if (m_.empty()) {
      const int m0 = math::nearest(maps_.signed_map, 0.0f), v0 = math::nearest(maps_.unsigned_map, 0.0f);
      for (const auto& p : params) {
        const std::int64_t blocks = (p.numel() + o_.block - 1) / o_.block;
        m_.emplace_back(*alloc_, Shape{p.numel()}, MemTag::OptimizerStates, Fill::Uninitialised);
        v_.emplace_back(*alloc_, Shape{p.numel()}, MemTag::OptimizerStates, Fill::Uninitialised);
        if (p.numel() > 0) {
          STRATA_CUDA_CHECK(cudaMemsetAsync(m_.back().data(), m0, static_cast<std::size_t>(p.numel()), alloc_->stream()));
          STRATA_CUDA_CHECK(cudaMemsetAsync(v_.back().data(), v0, static_cast<std::size_t>(p.numel()), alloc_->stream()));
        }
        m_max_.emplace_back(*alloc_, Shape{blocks}, MemTag::OptimizerStates);
        v_max_.emplace_back(*alloc_, Shape{blocks}, MemTag::OptimizerStates);
      }
    } else if (m_.size() != params.size()) {
      throw Error("optimizer: stepped with " + std::to_string(params.size()) + " parameters after " +
                  std::to_string(m_.size()));
    }
    ++t_;
    const math::Adam8bitStep a = math::adam8bit_at(a_, t_);
    for (std::size_t i = 0; i < params.size(); ++i)
      kernels::adam8bit_step(s, params[i].data(), grads[i].data(), m_[i].data(), v_[i].data(),
                             m_max_[i].data(), v_max_[i].data(), params[i].numel(), o_.block, a,
                             maps_, skip);
  }
  std::vector<std::vector<std::uint8_t>> download_states() const override {
    return download_by_parameter(m_, v_, m_max_, v_max_);
  }

 private:
  DeviceAllocator* alloc_;
  Adam8bitOptions o_;
  math::QuantMaps maps_;
  math::Adam8bitStep a_;
  std::vector<BasicDeviceTensor<std::uint8_t>> m_, v_;  // codes
  std::vector<DeviceTensor> m_max_, v_max_;             // absmax per block
};

class Lars final : public Optimizer {
 public:
  Lars(DeviceAllocator& a, const LarsOptions& o) : alloc_(&a) {
    a_.lr = o.lr;
    a_.momentum = o.momentum;
    a_.weight_decay = o.weight_decay;
    a_.trust_coefficient = o.trust_coefficient;
  }
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    ensure_state(velocity_, params, *alloc_);
    auto scratch = norm_scratch(*alloc_);
    for (std::size_t i = 0; i < params.size(); ++i)
      kernels::lars_step(s, params[i].data(), grads[i].data(), velocity_[i].data(), params[i].numel(), a_,
                         scratch.data(), skip);
    ++t_;
  }
  std::vector<std::vector<std::uint8_t>> download_states() const override { return download_each(velocity_); }

 private:
  DeviceAllocator* alloc_;
  math::LarsStep a_;
  std::vector<DeviceTensor> velocity_;
};

class Lamb final : public Optimizer {
 public:
  Lamb(DeviceAllocator& a, const LambOptions& o) : alloc_(&a) {
    a_.lr = o.lr;
    a_.beta1 = o.beta1;
    a_.beta2 = o.beta2;
    a_.eps = o.eps;
    a_.weight_decay = o.weight_decay;
  }
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    ensure_state(m_, params, *alloc_);
    ensure_state(v_, params, *alloc_);
    ++t_;
    const math::LambStep a = math::lamb_at(a_, t_);
    auto scratch = norm_scratch(*alloc_);
    for (std::size_t i = 0; i < params.size(); ++i)
      kernels::lamb_step(s, params[i].data(), grads[i].data(), m_[i].data(), v_[i].data(),
                         params[i].numel(), a, scratch.data(), skip);
  }
  std::vector<std::vector<std::uint8_t>> download_states() const override { return download_each(m_, v_); }

 private:
  DeviceAllocator* alloc_;
  math::LambStep a_;
  std::vector<DeviceTensor> m_, v_;
};

class Adafactor final : public Optimizer {
 public:
  Adafactor(DeviceAllocator& a, const AdafactorOptions& o) : alloc_(&a), decay_rate_(o.decay_rate) {
    a_.lr = o.lr;
    a_.eps1 = o.eps1;
    a_.clip_threshold = o.clip_threshold;
  }
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    ensure_factored(row_, col_, params, *alloc_);
    ++t_;
    const math::AdafactorStep a = math::adafactor_at(a_, decay_rate_, t_);
    // The update before clipping, for the largest tensor (the CPU takes one
    // per tensor in turn: the same peak).
    std::int64_t most = 0;
    for (const auto& p : params) most = std::max(most, p.numel());
    DeviceTensor u(*alloc_, Shape{most}, MemTag::Workspace, Fill::Uninitialised);
    auto scratch = norm_scratch(*alloc_);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const bool factored = !col_[i].empty();
      const std::int64_t rows = factored ? params[i].dim(0) : params[i].numel();
      const std::int64_t cols = factored ? params[i].dim(1) : 1;
      kernels::adafactor_step(s, params[i].data(), grads[i].data(), row_[i].data(),
                              factored ? col_[i].data() : nullptr, rows, cols, a, u.data(),
                              scratch.data(), skip);
    }
  }
  std::vector<std::vector<std::uint8_t>> download_states() const override {
    return download_by_parameter(row_, col_);
  }

 private:
  DeviceAllocator* alloc_;
  float decay_rate_;
  math::AdafactorStep a_;
  std::vector<DeviceTensor> row_, col_;  // matrices: R and C; others: V in row_, col_ empty
};

class Sm3 final : public Optimizer {
 public:
  Sm3(DeviceAllocator& a, const Sm3Options& o) : alloc_(&a), lr_(o.lr) {}
  void step(cudaStream_t s, std::span<DeviceTensor> params, std::span<const DeviceTensor> grads,
            const int* skip) override {
    check(params, grads);
    ensure_factored(row_, col_, params, *alloc_);
    // The new column covers, for the widest matrix.
    std::int64_t widest = 0;
    for (const auto& c : col_) widest = std::max(widest, c.numel());
    DeviceTensor new_c(*alloc_, Shape{widest}, MemTag::Workspace, Fill::Uninitialised);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const bool factored = !col_[i].empty();
      const std::int64_t rows = factored ? params[i].dim(0) : params[i].numel();
      const std::int64_t cols = factored ? params[i].dim(1) : 1;
      kernels::sm3_step(s, params[i].data(), grads[i].data(), row_[i].data(),
                        factored ? col_[i].data() : nullptr, rows, cols, lr_, new_c.data(), skip);
    }
    ++t_;
  }
  std::vector<std::vector<std::uint8_t>> download_states() const override {
    return download_by_parameter(row_, col_);
  }

 private:
  DeviceAllocator* alloc_;
  float lr_;
  std::vector<DeviceTensor> row_, col_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam8bit(DeviceAllocator& alloc, const Adam8bitOptions& o) {
  return std::make_unique<Adam8bit>(alloc, o);
}
std::unique_ptr<Optimizer> make_lars(DeviceAllocator& alloc, const LarsOptions& o) {
  return std::make_unique<Lars>(alloc, o);
}
std::unique_ptr<Optimizer> make_lamb(DeviceAllocator& alloc, const LambOptions& o) {
  return std::make_unique<Lamb>(alloc, o);
}
std::unique_ptr<Optimizer> make_adafactor(DeviceAllocator& alloc, const AdafactorOptions& o) {
  return std::make_unique<Adafactor>(alloc, o);
}
std::unique_ptr<Optimizer> make_sm3(DeviceAllocator& alloc, const Sm3Options& o) {
  return std::make_unique<Sm3>(alloc, o);
}

std::optional<std::string> unsupported_optimizer(strategies::Optimizer o) {
  // The capability table's optimizer rows (backend/common/capabilities.hpp).
  strategies::Scenario sc;
  sc.plan.optimizer = o;
  return refusal(sc, Backend::Cuda, "optimizer");
}

std::unique_ptr<Optimizer> make_optimizer(strategies::Optimizer o, float lr, float weight_decay,
                                          DeviceAllocator& alloc) {
  if (auto why = unsupported_optimizer(o)) throw Error("optimizer: " + *why);
  using strategies::Optimizer;
  switch (o) {
    case Optimizer::Sgd: return std::make_unique<Sgd>(alloc, lr, 0.0f, weight_decay);
    case Optimizer::Momentum: return std::make_unique<Sgd>(alloc, lr, 0.9f, weight_decay);
    case Optimizer::Adam: return std::make_unique<Adam>(alloc, lr, weight_decay, false);
    case Optimizer::AdamW: return std::make_unique<Adam>(alloc, lr, weight_decay, true);
    // The CPU executor's options for the same plan (backend/cpu/executor.cpp).
    case Optimizer::Adam8bit: return make_adam8bit(alloc, {.lr = lr, .weight_decay = weight_decay});
    case Optimizer::Lars: return make_lars(alloc, {.lr = lr, .weight_decay = weight_decay});
    case Optimizer::Lamb: return make_lamb(alloc, {.lr = lr, .weight_decay = weight_decay});
    case Optimizer::Adafactor: return make_adafactor(alloc, {.lr = lr});
    case Optimizer::Sm3: return make_sm3(alloc, {.lr = lr});
    case Optimizer::Adam4bit: break;
  }
  throw Error("optimizer: " + std::string(enum_name(o)) + " has no CUDA implementation");
}

}  // namespace strata::backend::cuda
