#pragma once
// bf16 storage and the per-element arithmetic of the bf16 kernels
// (kernels_bf16.cu), as inline functions that nvcc compiles for the device
// and g++ for the host, so bf16_math_test.cpp checks on the host what the
// kernels compute (no GPU needed).
//
// bf16 (bfloat16) is the top half of an IEEE fp32: sign, the same 8 exponent
// bits, 7 mantissa bits. Kernels load bf16, compute in fp32 and round once
// when they store (Micikevicius et al. 2018, "Mixed Precision Training";
// Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training").
// Conversion rounds to nearest, ties to even, as __float2bfloat16_rn and the
// PTX `cvt.rn.bf16.f32` do: NaN becomes the canonical quiet NaN 0x7FFF (CUDA's
// host conversion gives the same), and a float that rounds past the largest
// bf16 (0x7F7F, about 3.39e38) becomes ±Inf.
//
// Plain C++17, no CUDA or Strata header (the .cu files include it).
#include <math.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/optimizer_math.hpp"  // STRATA_HD

namespace strata::backend::cuda {

// A bf16 value as stored in device memory: the same two bytes as CUDA's
// __nv_bfloat16, so a `Bf16*` and a `__nv_bfloat16*` name the same data. A
// distinct type (not uint16_t) so host code picks the bf16 overloads of the
// kernels and ops by pointer type.
struct Bf16 {
  std::uint16_t bits;
};
static_assert(sizeof(Bf16) == 2, "bf16 is two bytes");

namespace math {

STRATA_HD inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
STRATA_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// fp32 → bf16, round to nearest even. Adding 0x7FFF plus the lowest kept
// bit carries into the kept bits exactly when the dropped half is above
// 0x8000, or equal to it with an odd kept part (a tie goes to even); a carry
// out of the mantissa raises the exponent, and out of the largest finite
// exponent gives Inf, as IEEE rounding does.
STRATA_HD inline Bf16 to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{0x7fff};  // NaN: canonical quiet NaN
  const std::uint32_t lsb = (u >> 16) & 1u;
  return Bf16{static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16)};
}
// bf16 → fp32 is exact: the bits are the float's top half.
STRATA_HD inline float to_float(Bf16 b) { return bits_float(static_cast<std::uint32_t>(b.bits) << 16); }
STRATA_HD inline float to_float(float f) { return f; }
// The value as stored in T (a float stays a float; a bf16 rounds).
template <class T>
STRATA_HD inline T store_as(float f);
template <>
STRATA_HD inline float store_as<float>(float f) {
  return f;
}
template <>
STRATA_HD inline Bf16 store_as<Bf16>(float f) {
  return to_bf16(f);
}
// f rounded to bf16 and back (what a bf16 store then load gives).
STRATA_HD inline float round_bf16(float f) { return to_float(to_bf16(f)); }

// --- element-wise math, fp32 (the fp32 kernels' expressions) ----------------------

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;

// GeLU, tanh approximation, and its derivative times dy.
STRATA_HD inline float gelu(float v) { return 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v))); }
STRATA_HD inline float gelu_grad(float v, float dy) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  const float dt = kGeluC * (1.0f + 3.0f * kGeluA * v * v) * (1.0f - t * t);
  return dy * (0.5f * (1.0f + t) + 0.5f * v * dt);
}
// SwiGLU: silu(g)·u; gradients with respect to g and u.
STRATA_HD inline float swiglu(float g, float u) { return g / (1.0f + expf(-g)) * u; }
STRATA_HD inline void swiglu_grad(float g, float u, float dy, float& dg, float& du) {
  const float sig = 1.0f / (1.0f + expf(-g));
  du = dy * g * sig;
  dg = dy * u * sig * (1.0f + g * (1.0f - sig));
}
// Layer norm of one element from its row's mean and 1/sqrt(var + eps); its
// input gradient from the row's means of ĝ = dy·γ and ĝ·x̂.
STRATA_HD inline float layernorm(float x, float mean, float rstd, float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}
STRATA_HD inline float layernorm_dx(float x, float dy, float gamma, float mean, float rstd, float mg,
                                    float mgx) {
  const float xhat = (x - mean) * rstd;
  return rstd * (dy * gamma - mg - xhat * mgx);
}
// RMS norm of one element from its row's 1/sqrt(mean(x²) + eps); its input
// gradient from the row's mean of ĝ·x̂.
STRATA_HD inline float rmsnorm(float x, float rr, float gamma) { return x * rr * gamma; }
STRATA_HD inline float rmsnorm_dx(float x, float dy, float gamma, float rr, float mgx) {
  return rr * (dy * gamma - x * rr * mgx);
}

// --- whole rows on the host, as the kernels compute them ------------------------------
// One row at a time with the kernels' element functions and fp32 statistics
// (the kernels sum in a tree: the same value to fp32 rounding). The unit test
// holds them to the CPU backend's fp32 kernels within bf16 rounding.

// y = layer norm of x (rows × dim), statistics in fp32 from the bf16 inputs.
inline void host_layernorm_forward(const Bf16* x, const Bf16* gamma, const Bf16* beta, Bf16* y,
                                   std::int64_t rows, std::int64_t dim, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const Bf16* xr = x + r * dim;
    float s = 0.0f;
    for (std::int64_t i = 0; i < dim; ++i) s += to_float(xr[i]);
    const float mean = s / static_cast<float>(dim);
    float v = 0.0f;
    for (std::int64_t i = 0; i < dim; ++i) {
      const float d = to_float(xr[i]) - mean;
      v += d * d;
    }
    const float rstd = 1.0f / sqrtf(v / static_cast<float>(dim) + eps);
    for (std::int64_t i = 0; i < dim; ++i)
      y[r * dim + i] = to_bf16(layernorm(to_float(xr[i]), mean, rstd, to_float(gamma[i]), to_float(beta[i])));
  }
}

// Causal softmax of row i of a seq × seq matrix in place (columns 0..i),
// fp32 maximum, exponentials and sum, one rounding to bf16 per output.
inline void host_causal_softmax_forward(Bf16* p, std::int64_t matrices, std::int64_t seq) {
  for (std::int64_t row = 0; row < matrices * seq; ++row) {
    const std::int64_t valid = row % seq + 1;
    Bf16* pr = p + row * seq;
    float mx = -INFINITY;
    for (std::int64_t j = 0; j < valid; ++j) mx = fmaxf(mx, to_float(pr[j]));
    float sum = 0.0f;
    for (std::int64_t j = 0; j < valid; ++j) sum += expf(to_float(pr[j]) - mx);
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < seq; ++j)
      pr[j] = j < valid ? to_bf16(expf(to_float(pr[j]) - mx) * inv) : Bf16{0};
  }
}

}  // namespace math
}  // namespace strata::backend::cuda
