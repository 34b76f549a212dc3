#include "backend/cpu/optimizer.hpp"

#include <algorithm>
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

namespace {
double norm2(const float* x, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

// Factored state: a rank-2 parameter gets [rows] and [cols] tensors, any
// other a full tensor in `row` and nothing in `col`.
void ensure_factored(std::vector<Tensor>& row, std::vector<Tensor>& col,
                     std::span<Tensor> params, Allocator& alloc) {
  if (!row.empty()) {
    if (row.size() != params.size())
      throw Error("optimizer: stepped with " + std::to_string(params.size()) +
                  " parameters after " + std::to_string(row.size()));
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
}  // namespace

namespace {
// bitsandbytes' dynamic map with 7 exponent bits over 8: for i = 0…6,
// 2^i (signed) or 2^(i+1) (unsigned) midpoints of linspace(0.1, 1) scaled by
// 10^(i−6), mirrored for the signed map, plus 0 and 1; sorted.
std::array<float, 256> dynamic_map(bool is_signed) {
  std::vector<double> d;
  for (int i = 0; i < 7; ++i) {
    const int items = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, i - 6);
    for (int k = 0; k < items; ++k) {
      const double mean = 0.1 + 0.9 * (k + 0.5) / items;
      d.push_back(scale * mean);
      if (is_signed) d.push_back(-scale * mean);
    }
  }
  d.push_back(0.0);
  d.push_back(1.0);
  std::sort(d.begin(), d.end());
  std::array<float, 256> out{};
  for (std::size_t i = 0; i < 256; ++i) out[i] = static_cast<float>(d[i]);
  return out;
}

// Index of the map value nearest to x (the lower one on a tie).
std::uint8_t nearest(const std::array<float, 256>& map, float x) {
  const auto it = std::lower_bound(map.begin(), map.end(), x);
  if (it == map.begin()) return 0;
  if (it == map.end()) return 255;
  const auto hi = static_cast<std::size_t>(it - map.begin());
  return static_cast<std::uint8_t>(x - map[hi - 1] <= map[hi] - x ? hi - 1 : hi);
}
}  // namespace

Adam8bit::Adam8bit(Allocator& alloc, Adam8bitOptions o)
    : alloc_(&alloc), o_(o), signed_(dynamic_map(true)), unsigned_(dynamic_map(false)) {
  if (o.block < 1) throw Error("Adam8bit: block must be >= 1");
}

void Adam8bit::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  if (m_.empty()) {
    for (const auto& p : params) {
      const std::int64_t blocks = (p.numel() + o_.block - 1) / o_.block;
      // Code 0 of neither map is 0: start every code at the map's zero.
      m_.emplace_back(*alloc_, Shape{p.numel()}, MemTag::OptimizerStates);
      v_.emplace_back(*alloc_, Shape{p.numel()}, MemTag::OptimizerStates);
      for (auto& c : m_.back().span()) c = nearest(signed_, 0.0f);
      for (auto& c : v_.back().span()) c = nearest(unsigned_, 0.0f);
      m_max_.emplace_back(*alloc_, Shape{blocks}, MemTag::OptimizerStates);
      v_max_.emplace_back(*alloc_, Shape{blocks}, MemTag::OptimizerStates);
    }
  } else if (m_.size() != params.size()) {
    throw Error("optimizer: stepped with " + std::to_string(params.size()) +
                " parameters after " + std::to_string(m_.size()));
  }
  ++t_;
  const double bc1 = 1.0 - std::pow(static_cast<double>(o_.beta1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o_.beta2), static_cast<double>(t_));
  const auto step_size = static_cast<float>(o_.lr / bc1);
  const auto inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  Tensor mt(*alloc_, {o_.block}, MemTag::Workspace), vt(*alloc_, {o_.block}, MemTag::Workspace);
  float* m = mt.data();
  float* v = vt.data();
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    std::uint8_t* mc = m_[i].data();
    std::uint8_t* vc = v_[i].data();
    const std::int64_t n = params[i].numel();
    for (std::int64_t b0 = 0, blk = 0; b0 < n; b0 += o_.block, ++blk) {
      const std::int64_t len = std::min(o_.block, n - b0);
      float m_abs = 0.0f, v_abs = 0.0f;
      for (std::int64_t j = 0; j < len; ++j) {
        const std::int64_t k = b0 + j;
        const float d = g[k];
        p[k] -= o_.lr * o_.weight_decay * p[k];
        m[j] = o_.beta1 * (signed_[mc[k]] * m_max_[i][blk]) + (1.0f - o_.beta1) * d;
        v[j] = o_.beta2 * (unsigned_[vc[k]] * v_max_[i][blk]) + (1.0f - o_.beta2) * d * d;
        p[k] -= step_size * m[j] / (std::sqrt(v[j]) * inv_sqrt_bc2 + o_.eps);
        m_abs = std::max(m_abs, std::abs(m[j]));
        v_abs = std::max(v_abs, v[j]);
      }
      m_max_[i][blk] = m_abs;
      v_max_[i][blk] = v_abs;
      for (std::int64_t j = 0; j < len; ++j) {
        mc[b0 + j] = nearest(signed_, m_abs > 0.0f ? m[j] / m_abs : 0.0f);
        vc[b0 + j] = nearest(unsigned_, v_abs > 0.0f ? v[j] / v_abs : 0.0f);
      }
    }
  }
}

void Lars::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  ensure_state(velocity_, params, *alloc_);
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    float* v = velocity_[i].data();
    const std::int64_t n = params[i].numel();
    const double wn = norm2(p, n), gn = norm2(g, n);
    const double trust = wn > 0.0 && gn > 0.0
                             ? o_.trust_coefficient * wn / (gn + o_.weight_decay * wn)
                             : 1.0;
    const auto local_lr = static_cast<float>(o_.lr * trust);
    for (std::int64_t j = 0; j < n; ++j) {
      v[j] = o_.momentum * v[j] + local_lr * (g[j] + o_.weight_decay * p[j]);
      p[j] -= v[j];
    }
  }
  ++t_;
}

void Lamb::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  ensure_state(m_, params, *alloc_);
  ensure_state(v_, params, *alloc_);
  ++t_;
  const double bc1 = 1.0 - std::pow(static_cast<double>(o_.beta1), static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o_.beta2), static_cast<double>(t_));
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const std::int64_t n = params[i].numel();
    const double wn = norm2(p, n);
    // First pass: moments and ‖u‖; the update is recomputed in the second.
    double un2 = 0.0;
    for (std::int64_t j = 0; j < n; ++j) {
      m[j] = o_.beta1 * m[j] + (1.0f - o_.beta1) * g[j];
      v[j] = o_.beta2 * v[j] + (1.0f - o_.beta2) * g[j] * g[j];
      const double u = (m[j] / bc1) / (std::sqrt(v[j] / bc2) + o_.eps) + o_.weight_decay * p[j];
      un2 += u * u;
    }
    const double un = std::sqrt(un2);
    const double ratio = wn > 0.0 && un > 0.0 ? wn / un : 1.0;
    const double step = o_.lr * ratio;
    for (std::int64_t j = 0; j < n; ++j) {
      const double u = (m[j] / bc1) / (std::sqrt(v[j] / bc2) + o_.eps) + o_.weight_decay * p[j];
      p[j] = static_cast<float>(p[j] - step * u);
    }
  }
}

void Adafactor::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  ensure_factored(row_, col_, params, *alloc_);
  ++t_;
  const auto b2 = static_cast<float>(1.0 - std::pow(static_cast<double>(t_), o_.decay_rate));
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    const std::int64_t n = params[i].numel();
    float* r = row_[i].data();
    // The update before clipping: scratch from the allocator, like every byte.
    Tensor ut(*alloc_, params[i].shape(), MemTag::Workspace);
    std::span<float> u = ut.span();
    if (col_[i].empty()) {
      for (std::int64_t j = 0; j < n; ++j) {
        r[j] = b2 * r[j] + (1.0f - b2) * (g[j] * g[j] + o_.eps1);
        u[static_cast<std::size_t>(j)] = g[j] / std::sqrt(r[j]);
      }
    } else {
      const std::int64_t rows = params[i].dim(0), cols = params[i].dim(1);
      float* c = col_[i].data();
      BasicTensor<double> rst(*alloc_, {rows}, MemTag::Workspace), cst(*alloc_, {cols}, MemTag::Workspace);
      std::span<double> rs = rst.span(), cs = cst.span();
      for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b) {
          const double q = static_cast<double>(g[a * cols + b]) * g[a * cols + b] + o_.eps1;
          rs[static_cast<std::size_t>(a)] += q;
          cs[static_cast<std::size_t>(b)] += q;
        }
      double total = 0.0;
      for (std::int64_t a = 0; a < rows; ++a) {
        r[a] = b2 * r[a] + (1.0f - b2) * static_cast<float>(rs[static_cast<std::size_t>(a)]);
        total += r[a];
      }
      for (std::int64_t b = 0; b < cols; ++b)
        c[b] = b2 * c[b] + (1.0f - b2) * static_cast<float>(cs[static_cast<std::size_t>(b)]);
      for (std::int64_t a = 0; a < rows; ++a)
        for (std::int64_t b = 0; b < cols; ++b)
          u[static_cast<std::size_t>(a * cols + b)] = static_cast<float>(
              g[a * cols + b] / std::sqrt(static_cast<double>(r[a]) * c[b] / total));
    }
    const double rms = norm2(u.data(), n) / std::sqrt(static_cast<double>(n));
    const double scale = o_.lr / std::max(1.0, rms / o_.clip_threshold);
    for (std::int64_t j = 0; j < n; ++j)
      p[j] = static_cast<float>(p[j] - scale * u[static_cast<std::size_t>(j)]);
  }
}

void Sm3::step(std::span<Tensor> params, std::span<const Tensor> grads) {
  check(params, grads);
  ensure_factored(row_, col_, params, *alloc_);
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].data();
    const float* g = grads[i].data();
    const std::int64_t n = params[i].numel();
    float* r = row_[i].data();
    auto apply = [&](std::int64_t j, float nu) {
      if (nu > 0.0f) p[j] -= o_.lr * g[j] / std::sqrt(nu);
    };
    if (col_[i].empty()) {
      for (std::int64_t j = 0; j < n; ++j) {
        r[j] += g[j] * g[j];
        apply(j, r[j]);
      }
      continue;
    }
    const std::int64_t rows = params[i].dim(0), cols = params[i].dim(1);
    float* c = col_[i].data();
    Tensor rt(*alloc_, {rows}, MemTag::Workspace), ct(*alloc_, {cols}, MemTag::Workspace);
    std::span<float> new_r = rt.span(), new_c = ct.span();
    for (std::int64_t a = 0; a < rows; ++a)
      for (std::int64_t b = 0; b < cols; ++b) {
        const std::int64_t j = a * cols + b;
        const float nu = std::min(r[a], c[b]) + g[j] * g[j];
        new_r[static_cast<std::size_t>(a)] = std::max(new_r[static_cast<std::size_t>(a)], nu);
        new_c[static_cast<std::size_t>(b)] = std::max(new_c[static_cast<std::size_t>(b)], nu);
        apply(j, nu);
      }
    std::copy(new_r.begin(), new_r.end(), r);
    std::copy(new_c.begin(), new_c.end(), c);
  }
  ++t_;
}

}  // namespace strata::backend::cpu
