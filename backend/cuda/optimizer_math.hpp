#pragma once
// The arithmetic of the CUDA backend's 8-bit Adam, LARS, LAMB, Adafactor and
// SM3 (optimizer_kernels.cu), element by element and tensor by tensor, as
// inline functions that nvcc compiles for the device and g++ for the host.
// Each is the expression of backend/cpu/optimizer.cpp, written with the same
// types and the same order of operations (float where the CPU computes in
// float, double where it promotes), so the kernels compute what the CPU
// optimizers compute: optimizer_kernels.cu is compiled with -fmad=false, so
// no multiply-add is fused and every float and double operation rounds as
// on the host. What differs on the device is only the order of the sums
// behind the norms (a tree instead of a loop). optimizer_math_test.cpp runs
// these functions on the host against backend/cpu, which needs no GPU.
//
// Plain C++17 (nvcc compiles the kernels as C++17), no CUDA or Strata header.
#include <math.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata::backend::cuda::math {

// Squares summed for a 2-norm, in double as the CPU's norm2.
STRATA_HD inline double square(float x) { return static_cast<double>(x) * static_cast<double>(x); }
// std::max(acc, x) and std::min(a, b) as the standard library defines them
// (the first argument unless the other is strictly larger or smaller).
STRATA_HD inline float keep_max(float acc, float x) { return acc < x ? x : acc; }
STRATA_HD inline float keep_min(float a, float b) { return b < a ? b : a; }

// --- 8-bit Adam (Dettmers et al. 2022, block-wise) ---------------------------------

constexpr int kMapSize = 256;

// The two quantization maps, ascending: signed for m (−1 … 1), unsigned for v
// (0 … 1). Passed to the kernel by value (2 KiB of kernel parameters).
struct QuantMaps {
  float signed_map[kMapSize];
  float unsigned_map[kMapSize];
};

// bitsandbytes' create_dynamic_map with 7 exponent bits over 8, as
// backend/cpu's dynamic_map: for i = 0…6, 2^i (signed) or 2^(i+1)
// (unsigned) midpoints of linspace(0.1, 1) scaled by 10^(i−6), mirrored for
// the signed map, plus 0 and 1; sorted. Host only.
inline std::array<float, kMapSize> dynamic_map(bool is_signed) {
  std::array<double, kMapSize> d{};
  std::size_t at = 0;
  for (int i = 0; i < 7; ++i) {
    const int items = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, i - 6);
    for (int k = 0; k < items; ++k) {
      const double mean = 0.1 + 0.9 * (k + 0.5) / items;
      d[at++] = scale * mean;
      if (is_signed) d[at++] = -scale * mean;
    }
  }
  d[at++] = 0.0;
  d[at++] = 1.0;
  std::sort(d.begin(), d.end());
  std::array<float, kMapSize> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(d[i]);
  return out;
}

inline QuantMaps quant_maps() {
  QuantMaps q{};
  const auto s = dynamic_map(true), u = dynamic_map(false);
  std::copy(s.begin(), s.end(), q.signed_map);
  std::copy(u.begin(), u.end(), q.unsigned_map);
  return q;
}

// Index of the map value nearest to x, the lower one on a tie: std::lower_bound
// written out (the first value not less than x), then the closer neighbour.
STRATA_HD inline std::uint8_t nearest(const float* map, float x) {
  int lo = 0, count = kMapSize;
  while (count > 0) {
    const int step = count / 2;
    if (map[lo + step] < x) {
      lo += step + 1;
      count -= step + 1;
    } else {
      count = step;
    }
  }
  if (lo == 0) return 0;
  if (lo == kMapSize) return kMapSize - 1;
  return static_cast<std::uint8_t>(x - map[lo - 1] <= map[lo] - x ? lo - 1 : lo);
}

// A moment's code after dividing by its block's new absmax (0 for an all-zero block).
STRATA_HD inline std::uint8_t quantize(const float* map, float x, float absmax) {
  return nearest(map, absmax > 0.0f ? x / absmax : 0.0f);
}

struct Adam8bitStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  float step_size = 0;     // lr / (1 − β₁ᵗ)
  float inv_sqrt_bc2 = 0;  // 1 / sqrt(1 − β₂ᵗ)
};

// The bias corrections of step t (1-based), in double as the CPU's.
inline Adam8bitStep adam8bit_at(Adam8bitStep a, std::int64_t t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(t));
  a.step_size = static_cast<float>(a.lr / bc1);
  a.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  return a;
}

// The new m and v of one element from its codes, its block's absmax and g:
// dequantize, then the AdamW moments.
STRATA_HD inline void adam8bit_moments(const Adam8bitStep& a, const QuantMaps& q, std::uint8_t mc,
                                       std::uint8_t vc, float m_max, float v_max, float g, float& m,
                                       float& v) {
  m = a.beta1 * (q.signed_map[mc] * m_max) + (1.0f - a.beta1) * g;
  v = a.beta2 * (q.unsigned_map[vc] * v_max) + (1.0f - a.beta2) * g * g;
}
// Decoupled weight decay, then the Adam step with the fp32 moments.
STRATA_HD inline float adam8bit_param(const Adam8bitStep& a, float p, float m, float v) {
  p -= a.lr * a.weight_decay * p;
  p -= a.step_size * m / (sqrtf(v) * a.inv_sqrt_bc2 + a.eps);
  return p;
}

// --- LARS (You et al. 2017) ----------------------------------------------------------

struct LarsStep {
  float lr = 1e-1f, momentum = 0.9f, weight_decay = 0.0f, trust_coefficient = 1e-3f;
};

// lr·trust from Σw² and Σg²: trust = η‖w‖/(‖g‖ + wd‖w‖), 1 when a norm is 0.
STRATA_HD inline float lars_local_lr(const LarsStep& a, double w2, double g2) {
  const double wn = sqrt(w2), gn = sqrt(g2);
  const double trust = wn > 0.0 && gn > 0.0
                           ? a.trust_coefficient * wn / (gn + a.weight_decay * wn)
                           : 1.0;
  return static_cast<float>(a.lr * trust);
}
// v = μv + lr·trust·(g + wd·w); w −= v.
STRATA_HD inline void lars_update(const LarsStep& a, float local_lr, float& p, float g, float& v) {
  v = a.momentum * v + local_lr * (g + a.weight_decay * p);
  p -= v;
}

// --- LAMB (You et al. 2019) ----------------------------------------------------------

struct LambStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.0f;
  double bc1 = 1, bc2 = 1;  // 1 − β₁ᵗ, 1 − β₂ᵗ
};

inline LambStep lamb_at(LambStep a, std::int64_t t) {
  a.bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(t));
  a.bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(t));
  return a;
}

STRATA_HD inline void lamb_moments(const LambStep& a, float g, float& m, float& v) {
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
}
// u = m̂/(sqrt(v̂) + eps) + wd·w, in double (wd·w in float, as the CPU's).
STRATA_HD inline double lamb_direction(const LambStep& a, float p, float m, float v) {
  return (static_cast<double>(m) / a.bc1) / (sqrt(static_cast<double>(v) / a.bc2) + a.eps) +
         static_cast<double>(a.weight_decay * p);
}
// lr·‖w‖/‖u‖ from Σw² and Σu² (ratio 1 when a norm is 0).
STRATA_HD inline double lamb_step_size(const LambStep& a, double w2, double u2) {
  const double wn = sqrt(w2), un = sqrt(u2);
  const double ratio = wn > 0.0 && un > 0.0 ? wn / un : 1.0;
  return a.lr * ratio;
}
STRATA_HD inline float lamb_update(double step, float p, double u) {
  return static_cast<float>(p - step * u);
}

// --- Adafactor (Shazeer & Stern 2018) ------------------------------------------------

struct AdafactorStep {
  float lr = 1e-2f, eps1 = 1e-30f, clip_threshold = 1.0f;
  float b2 = 0;  // β̂₂ₜ = 1 − t^decay_rate
};

inline AdafactorStep adafactor_at(AdafactorStep a, float decay_rate, std::int64_t t) {
  a.b2 = static_cast<float>(1.0 - std::pow(static_cast<double>(t), decay_rate));
  return a;
}

// g² + ε₁ of one element of a matrix, summed in double over its row and column.
STRATA_HD inline double adafactor_sq(const AdafactorStep& a, float g) {
  return static_cast<double>(g) * g + a.eps1;
}
// A row (or column) statistic decayed with the new sum.
STRATA_HD inline float adafactor_decay(const AdafactorStep& a, float r, double sum) {
  return a.b2 * r + (1.0f - a.b2) * static_cast<float>(sum);
}
// U of a matrix element: g/sqrt(R_a·C_b/ΣR).
STRATA_HD inline float adafactor_factored_u(float g, float r, float c, double total) {
  return static_cast<float>(g / sqrt(static_cast<double>(r) * c / total));
}
// A tensor that is not a matrix: its full V decays with g² + ε₁; U = g/sqrt(V).
STRATA_HD inline float adafactor_full_u(const AdafactorStep& a, float g, float& v) {
  v = a.b2 * v + (1.0f - a.b2) * (g * g + a.eps1);
  return g / sqrtf(v);
}
// lr/max(1, RMS(U)/d) from ΣU² over n elements.
STRATA_HD inline double adafactor_scale(const AdafactorStep& a, double u2, std::int64_t n) {
  const double rms = sqrt(u2) / sqrt(static_cast<double>(n));
  const double clip = rms / a.clip_threshold;
  return a.lr / (1.0 < clip ? clip : 1.0);
}
STRATA_HD inline float adafactor_update(double scale, float p, float u) {
  return static_cast<float>(p - scale * u);
}

// --- SM3-II (Anil et al. 2019) -------------------------------------------------------

// ν of a matrix element from its row and column covers.
STRATA_HD inline float sm3_nu(float r, float c, float g) { return keep_min(r, c) + g * g; }
// w −= lr·g/sqrt(ν), nothing where ν = 0.
STRATA_HD inline float sm3_apply(float lr, float p, float g, float nu) {
  return nu > 0.0f ? p - lr * g / sqrtf(nu) : p;
}

}  // namespace strata::backend::cuda::math
