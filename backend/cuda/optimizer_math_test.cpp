// The CUDA optimizers' arithmetic (optimizer_math.hpp) on the host, against
// the CPU optimizers (backend/cpu/optimizer.cpp). Each host driver below
// walks a tensor as the kernels of optimizer_kernels.cu do (the same passes,
// the same functions per element and per tensor; the norms' sums in a loop
// where the device uses a tree) and must give the CPU's parameters and
// states. Needs no GPU: it is what checks the kernels' math where none exists.
#include "backend/cuda/optimizer_math.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/optimizer.hpp"
#include "backend/cuda/optimizer_testing.hpp"

namespace strata::backend::cuda {
namespace {

using test::Rule;
using test::RuleCase;
using Vec = std::vector<float>;
using Bytes8 = std::vector<std::uint8_t>;

template <class T>
Bytes8 as_bytes(const std::vector<T>& v) {
  Bytes8 b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The optimizer_kernels.cu launches of one step, on host vectors. States in
// the CPU optimizer's order of allocation, as Optimizer::download_states.
class HostDriver {
 public:
  HostDriver(const RuleCase& c, const std::vector<Shape>& shapes)
      : c_(c), shapes_(shapes), maps_(math::quant_maps()) {
    for (const auto& s : shapes) {
      const auto n = static_cast<std::size_t>(s.numel());
      const bool matrix = s.rank() == 2;
      switch (c.rule) {
        case Rule::Adam8bit: {
          const auto blocks = static_cast<std::size_t>((s.numel() + c.adam8bit.block - 1) / c.adam8bit.block);
          a_.push_back(std::vector<std::uint8_t>(n, math::nearest(maps_.signed_map, 0.0f)));
          b_.push_back(std::vector<std::uint8_t>(n, math::nearest(maps_.unsigned_map, 0.0f)));
          x_.push_back(Vec(blocks, 0.0f));
          y_.push_back(Vec(blocks, 0.0f));
          break;
        }
        case Rule::Lars: x_.push_back(Vec(n, 0.0f)); break;
        case Rule::Lamb:
          x_.push_back(Vec(n, 0.0f));
          y_.push_back(Vec(n, 0.0f));
          break;
        case Rule::Adafactor:
        case Rule::Sm3:
          x_.push_back(Vec(matrix ? static_cast<std::size_t>(s[0]) : n, 0.0f));
          y_.push_back(Vec(matrix ? static_cast<std::size_t>(s[1]) : 0, 0.0f));
          break;
      }
    }
  }

  void step(std::vector<Vec>& p, const std::vector<Vec>& g) {
    ++t_;
    for (std::size_t i = 0; i < p.size(); ++i) {
      switch (c_.rule) {
        case Rule::Adam8bit: adam8bit(i, p[i], g[i]); break;
        case Rule::Lars: lars(i, p[i], g[i]); break;
        case Rule::Lamb: lamb(i, p[i], g[i]); break;
        case Rule::Adafactor: adafactor(i, p[i], g[i]); break;
        case Rule::Sm3: sm3(i, p[i], g[i]); break;
      }
    }
  }

  std::vector<Bytes8> states() const {
    std::vector<Bytes8> out;
    switch (c_.rule) {
      case Rule::Adam8bit:
        for (std::size_t i = 0; i < a_.size(); ++i) {
          out.push_back(a_[i]);
          out.push_back(b_[i]);
          out.push_back(as_bytes(x_[i]));
          out.push_back(as_bytes(y_[i]));
        }
        break;
      case Rule::Lars:
        for (const auto& v : x_) out.push_back(as_bytes(v));
        break;
      case Rule::Lamb:
        for (const auto& v : x_) out.push_back(as_bytes(v));
        for (const auto& v : y_) out.push_back(as_bytes(v));
        break;
      case Rule::Adafactor:
      case Rule::Sm3:
        for (std::size_t i = 0; i < x_.size(); ++i) {
          out.push_back(as_bytes(x_[i]));
          if (!y_[i].empty()) out.push_back(as_bytes(y_[i]));
        }
        break;
    }
    return out;
  }

 private:
  // adam8bit_kernel, one CUDA block per quantization block.
  void adam8bit(std::size_t i, Vec& p, const Vec& g) {
    math::Adam8bitStep a;
    a.lr = c_.adam8bit.lr;
    a.beta1 = c_.adam8bit.beta1;
    a.beta2 = c_.adam8bit.beta2;
    a.eps = c_.adam8bit.eps;
    a.weight_decay = c_.adam8bit.weight_decay;
    a = math::adam8bit_at(a, t_);
    const auto n = static_cast<std::int64_t>(p.size()), block = c_.adam8bit.block;
    auto& mc = a_[i];
    auto& vc = b_[i];
    for (std::int64_t b0 = 0, blk = 0; b0 < n; b0 += block, ++blk) {
      const std::int64_t len = std::min(block, n - b0);
      const float m_old = x_[i][static_cast<std::size_t>(blk)], v_old = y_[i][static_cast<std::size_t>(blk)];
      float m_abs = 0.0f, v_abs = 0.0f;
      for (std::int64_t k = b0; k < b0 + len; ++k) {
        const auto j = static_cast<std::size_t>(k);
        float m, v;
        math::adam8bit_moments(a, maps_, mc[j], vc[j], m_old, v_old, g[j], m, v);
        p[j] = math::adam8bit_param(a, p[j], m, v);
        m_abs = math::keep_max(m_abs, std::fabs(m));
        v_abs = math::keep_max(v_abs, v);
      }
      for (std::int64_t k = b0; k < b0 + len; ++k) {
        const auto j = static_cast<std::size_t>(k);
        float m, v;
        math::adam8bit_moments(a, maps_, mc[j], vc[j], m_old, v_old, g[j], m, v);
        mc[j] = math::quantize(maps_.signed_map, m, m_abs);
        vc[j] = math::quantize(maps_.unsigned_map, v, v_abs);
      }
      x_[i][static_cast<std::size_t>(blk)] = m_abs;
      y_[i][static_cast<std::size_t>(blk)] = v_abs;
    }
  }

  // lars_norms_kernel, reduce_partials, lars_update_kernel.
  void lars(std::size_t i, Vec& p, const Vec& g) {
    const math::LarsStep a{c_.lars.lr, c_.lars.momentum, c_.lars.weight_decay, c_.lars.trust_coefficient};
    double w2 = 0.0, g2 = 0.0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      w2 += math::square(p[j]);
      g2 += math::square(g[j]);
    }
    const float local_lr = math::lars_local_lr(a, w2, g2);
    for (std::size_t j = 0; j < p.size(); ++j) math::lars_update(a, local_lr, p[j], g[j], x_[i][j]);
  }

  // lamb_moments_kernel, reduce_partials, lamb_update_kernel.
  void lamb(std::size_t i, Vec& p, const Vec& g) {
    math::LambStep a;
    a.lr = c_.lamb.lr;
    a.beta1 = c_.lamb.beta1;
    a.beta2 = c_.lamb.beta2;
    a.eps = c_.lamb.eps;
    a.weight_decay = c_.lamb.weight_decay;
    a = math::lamb_at(a, t_);
    Vec& m = x_[i];
    Vec& v = y_[i];
    double w2 = 0.0, u2 = 0.0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      math::lamb_moments(a, g[j], m[j], v[j]);
      const double u = math::lamb_direction(a, p[j], m[j], v[j]);
      w2 += math::square(p[j]);
      u2 += u * u;
    }
    const double step = math::lamb_step_size(a, w2, u2);
    for (std::size_t j = 0; j < p.size(); ++j)
      p[j] = math::lamb_update(step, p[j], math::lamb_direction(a, p[j], m[j], v[j]));
  }

  // adafactor_rows, _cols, _total (matrices), adafactor_u, reduce, adafactor_update.
  void adafactor(std::size_t i, Vec& p, const Vec& g) {
    math::AdafactorStep a;
    a.lr = c_.adafactor.lr;
    a.eps1 = c_.adafactor.eps1;
    a.clip_threshold = c_.adafactor.clip_threshold;
    a = math::adafactor_at(a, c_.adafactor.decay_rate, t_);
    Vec& r = x_[i];
    Vec& c = y_[i];
    Vec u(p.size());
    if (!c.empty()) {
      const std::size_t rows = r.size(), cols = c.size();
      for (std::size_t row = 0; row < rows; ++row) {
        double s = 0.0;
        for (std::size_t b = 0; b < cols; ++b) s += math::adafactor_sq(a, g[row * cols + b]);
        r[row] = math::adafactor_decay(a, r[row], s);
      }
      for (std::size_t b = 0; b < cols; ++b) {
        double s = 0.0;
        for (std::size_t row = 0; row < rows; ++row) s += math::adafactor_sq(a, g[row * cols + b]);
        c[b] = math::adafactor_decay(a, c[b], s);
      }
      double total = 0.0;
      for (float x : r) total += x;
      for (std::size_t j = 0; j < p.size(); ++j) u[j] = math::adafactor_factored_u(g[j], r[j / cols], c[j % cols], total);
    } else {
      for (std::size_t j = 0; j < p.size(); ++j) u[j] = math::adafactor_full_u(a, g[j], r[j]);
    }
    double u2 = 0.0;
    for (float x : u) u2 += math::square(x);
    const double scale = math::adafactor_scale(a, u2, static_cast<std::int64_t>(p.size()));
    for (std::size_t j = 0; j < p.size(); ++j) p[j] = math::adafactor_update(scale, p[j], u[j]);
  }

  // sm3_cols_kernel, sm3_rows_kernel, sm3_copy_kernel; sm3_full_kernel.
  void sm3(std::size_t i, Vec& p, const Vec& g) {
    const float lr = c_.sm3.lr;
    Vec& r = x_[i];
    Vec& c = y_[i];
    if (c.empty()) {
      for (std::size_t j = 0; j < p.size(); ++j) {
        r[j] = r[j] + g[j] * g[j];
        p[j] = math::sm3_apply(lr, p[j], g[j], r[j]);
      }
      return;
    }
    const std::size_t rows = r.size(), cols = c.size();
    Vec new_c(cols);
    for (std::size_t b = 0; b < cols; ++b) {
      float mx = 0.0f;
      for (std::size_t row = 0; row < rows; ++row) mx = math::keep_max(mx, math::sm3_nu(r[row], c[b], g[row * cols + b]));
      new_c[b] = mx;
    }
    for (std::size_t row = 0; row < rows; ++row) {
      float mx = 0.0f;
      for (std::size_t b = 0; b < cols; ++b) {
        const std::size_t j = row * cols + b;
        const float nu = math::sm3_nu(r[row], c[b], g[j]);
        p[j] = math::sm3_apply(lr, p[j], g[j], nu);
        mx = math::keep_max(mx, nu);
      }
      r[row] = mx;
    }
    c = new_c;
  }

  RuleCase c_;
  std::vector<Shape> shapes_;
  math::QuantMaps maps_;
  std::int64_t t_ = 0;
  std::vector<std::vector<std::uint8_t>> a_, b_;  // 8-bit codes of m, v
  std::vector<Vec> x_, y_;                        // the float states
};

// Largest |got − want| over max(1, |want|) of one buffer of floats.
double rel_diff(const Bytes8& got, const Bytes8& want) {
  const std::size_t n = want.size() / sizeof(float);
  Vec a(n), b(n);
  std::memcpy(a.data(), got.data(), n * sizeof(float));
  std::memcpy(b.data(), want.data(), n * sizeof(float));
  double worst = 0.0;
  for (std::size_t j = 0; j < n; ++j)
    worst = std::max(worst, std::abs(static_cast<double>(a[j]) - b[j]) / std::max(1.0, std::abs(static_cast<double>(b[j]))));
  return worst;
}

TEST_CASE("cuda/optimizer_math: the quantization maps are the CPU 8-bit Adam's, bit for bit") {
  // Both build bitsandbytes' dynamic map; nearest() is std::lower_bound and
  // the closer neighbour, so it picks the CPU's codes for any x, ties included.
  cpu::TrackingAllocator a;
  cpu::Adam8bit ref(a, {});
  const auto s = math::dynamic_map(true), u = math::dynamic_map(false);
  CHECK(std::memcmp(s.data(), ref.signed_map().data(), sizeof(float) * 256) == 0);
  CHECK(std::memcmp(u.data(), ref.unsigned_map().data(), sizeof(float) * 256) == 0);
  // 127 negative values mirroring the positive ones below 1, then 0, then 1.
  CHECK(s.front() == -s[254]);
  CHECK(s[127] == 0.0f);
  CHECK(u.front() == 0.0f);
  CHECK(s.back() == 1.0f);
  CHECK(u.back() == 1.0f);
  // Exact map values map to themselves; the midpoint of two goes to the lower.
  for (int k = 0; k < 256; ++k) CHECK(math::nearest(s.data(), s[static_cast<std::size_t>(k)]) == k);
  const float mid = s[100] + (s[101] - s[100]) / 2;
  if (mid - s[100] == s[101] - mid) CHECK(math::nearest(s.data(), mid) == 100);
  CHECK(math::nearest(s.data(), -5.0f) == 0);
  CHECK(math::nearest(s.data(), 5.0f) == 255);
}

TEST_CASE("cuda/optimizer_math: 8-bit Adam, LARS, LAMB, Adafactor and SM3 step as the CPU optimizers") {
  // Five steps on odd-sized tensors. 8-bit Adam and SM3 compute in float in
  // the CPU's order: parameters, codes and absmax identical bit for bit.
  // LARS, LAMB and Adafactor too on the host (the norms' sums in the CPU's
  // order); held to 1e-6 of the scale, the bound the device's tree sums
  // must also meet (optimizer_test.cpp).
  const auto shapes = test::odd_shapes();
  for (const auto& c : test::rule_cases()) {
    CAPTURE(c.name);
    backend::Rng rng(7);
    auto p = test::random_tensors(shapes, rng, 1.0);
    const auto p0 = p;
    test::CpuRun ref(c, shapes, p);
    HostDriver host(c, shapes);
    const bool exact = c.rule == Rule::Adam8bit || c.rule == Rule::Sm3;
    for (int s = 0; s < 5; ++s) {
      CAPTURE(s);
      const auto g = test::step_grads(shapes, rng, s);
      ref.step(g);
      host.step(p, g);
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        CAPTURE(i);
        const Vec want = ref.param(i);
        if (exact) {
          CHECK(std::memcmp(p[i].data(), want.data(), want.size() * sizeof(float)) == 0);
        } else {
          CHECK(rel_diff(as_bytes(p[i]), as_bytes(want)) <= 1e-6);
        }
      }
      const auto got = host.states(), want = ref.alloc.states();
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        CAPTURE(k);
        REQUIRE(got[k].size() == want[k].size());
        if (exact)
          CHECK(got[k] == want[k]);
        else
          CHECK(rel_diff(got[k], want[k]) <= 1e-6);
      }
    }
    // Every tensor moved (a driver that did nothing would match nothing above
    // only by accident, but say it).
    for (std::size_t i = 0; i < shapes.size(); ++i) CHECK(p[i] != p0[i]);
    // State bytes: what the host driver holds is what the CPU allocated.
    Bytes total = 0;
    for (const auto& b : host.states()) total += static_cast<Bytes>(b.size());
    CHECK(total == ref.alloc.state_bytes());
  }
}

TEST_CASE("cuda/optimizer_math: 8-bit Adam's state is 2 + 8/block bytes per parameter") {
  // 4099 elements in blocks of 2048: two code bytes each and 3 blocks × 2 absmax floats.
  const RuleCase c = test::rule_cases()[0];
  HostDriver host(c, {Shape{4099}});
  Bytes total = 0;
  for (const auto& b : host.states()) total += static_cast<Bytes>(b.size());
  CHECK(total == 2 * 4099 + 3 * 2 * 4);
}

}  // namespace
}  // namespace strata::backend::cuda
