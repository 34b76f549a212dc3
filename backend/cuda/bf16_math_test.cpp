// bf16_math.hpp on the host: the float ↔ bf16 conversion the bf16 kernels
// use (against known bit patterns, every bf16 value, and round-to-nearest-
// even checked from first principles on random floats), and the kernels'
// per-element math and row-wise host versions against the CPU backend's fp32
// kernels within bf16 rounding. Needs no GPU: it checks the device math
// where none exists (plain C++, label unit).
#include "backend/cuda/bf16_math.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.hpp"
#include "backend/common/rng.hpp"

namespace strata::backend::cuda {
namespace {

using math::to_bf16;
using math::to_float;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint16_t bits(float f) { return to_bf16(f).bits; }

// One bf16 ulp relative (2^-7) is the spacing; rounding errs by at most half.
constexpr double kHalfUlp = 1.0 / 256.0;

std::vector<float> normal(std::size_t n, std::uint64_t seed, float sd = 1.0f) {
  backend::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = sd * static_cast<float>(rng.normal());
  return v;
}
std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = math::to_bf16(v[i]);
  return out;
}
std::vector<float> to_float(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = math::to_float(v[i]);
  return out;
}

TEST_CASE("cuda/bf16: conversion of known values gives __float2bfloat16_rn's bits") {
  // Exact values keep the float's top half.
  CHECK(bits(1.0f) == 0x3F80);
  CHECK(bits(-2.0f) == 0xC000);
  CHECK(bits(0.5f) == 0x3F00);
  CHECK(bits(0.0f) == 0x0000);
  CHECK(bits(-0.0f) == 0x8000);
  CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // 1 + 2^-8 lies halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81):
  // the tie goes to the even 0x3F80; 1 + 3·2^-8 lies between 0x3F81 (odd) and
  // 0x3F82 (even): up to 0x3F82.
  CHECK(bits(from_bits(0x3F808000u)) == 0x3F80);
  CHECK(bits(from_bits(0x3F818000u)) == 0x3F82);
  // Just above and below half an ulp.
  CHECK(bits(from_bits(0x3F808001u)) == 0x3F81);
  CHECK(bits(from_bits(0x3F807FFFu)) == 0x3F80);
  CHECK(bits(from_bits(0xBF808001u)) == 0xBF81);  // the same for negatives (magnitude)
  // 1/3 = 0x3EAAAAAB: the dropped half 0xAAAB is above 0x8000, so up to 0x3EAB.
  CHECK(bits(1.0f / 3.0f) == 0x3EAB);
  // Overflow: the largest finite bf16 is 0x7F7F; a float at or past half an
  // ulp above it rounds to Inf (FLT_MAX included), below half stays finite.
  CHECK(bits(from_bits(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(bits(from_bits(0x7F7F8000u)) == 0x7F80);  // a tie; 0x7F7F is odd, so up
  CHECK(bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(bits(-std::numeric_limits<float>::max()) == 0xFF80);
  // Subnormals round the same way (no flush to zero).
  CHECK(bits(from_bits(0x00000001u)) == 0x0000);
  CHECK(bits(from_bits(0x00008000u)) == 0x0000);  // tie to even 0
  CHECK(bits(from_bits(0x00018000u)) == 0x0002);  // tie to even 2
  CHECK(bits(from_bits(0x00008001u)) == 0x0001);
  // NaN stays NaN, as the canonical quiet NaN 0x7FFF, whatever its payload
  // or sign (a NaN whose payload sits in the low half must not become Inf).
  CHECK(bits(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
  CHECK(bits(from_bits(0x7F800001u)) == 0x7FFF);
  CHECK(bits(from_bits(0xFFC00000u)) == 0x7FFF);
  CHECK(std::isnan(to_float(Bf16{0x7FFF})));
  // bf16 → float puts the bits in the top half.
  CHECK(to_float(Bf16{0x3F80}) == 1.0f);
  CHECK(to_float(Bf16{0xC040}) == -3.0f);
  CHECK(to_float(Bf16{0x7F7F}) == from_bits(0x7F7F0000u));
}

TEST_CASE("cuda/bf16: every bf16 value survives float and back; random floats go to the nearest, ties to even") {
  // All 65536 patterns: a bf16 converts to a float exactly and back to itself
  // (NaNs to the canonical NaN).
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const Bf16 v{static_cast<std::uint16_t>(b)};
    const float f = to_float(v);
    if (std::isnan(f))
      CHECK(bits(f) == 0x7FFF);
    else
      REQUIRE(bits(f) == b);
  }
  // Random finite floats: the result is the nearer of the two bf16 values
  // around x (computed in double), the even one on a tie, Inf past the top.
  backend::Rng rng(11);
  int ties = 0;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.next());
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // force ties
    const float x = from_bits(u);
    if (!std::isfinite(x)) continue;
    const std::uint32_t down = u & 0xFFFF0000u;                // toward zero
    const std::uint32_t up = down + 0x10000u;                  // away from zero (may be Inf)
    // Past the largest finite bf16 the next value up is 2^128 with an
    // unbounded exponent: IEEE rounds to Inf from half an ulp below it.
    const double dx = x, dd = from_bits(down);
    const double du = std::isinf(from_bits(up)) ? std::copysign(std::ldexp(1.0, 128), dx) : from_bits(up);
    const double e_down = std::fabs(dx - dd), e_up = std::fabs(du - dx);
    std::uint16_t want;
    if (e_down < e_up)
      want = static_cast<std::uint16_t>(down >> 16);
    else if (e_up < e_down)
      want = static_cast<std::uint16_t>(up >> 16);
    else {
      ++ties;
      want = static_cast<std::uint16_t>(((down >> 16) & 1u) == 0 ? down >> 16 : up >> 16);
    }
    REQUIRE_MESSAGE(bits(x) == want, "x bits " << std::hex << u);
  }
  CHECK(ties > 40000);
}

// |got − want| within bf16 rounding of want (plus an absolute floor for values
// near 0, whose relative error is meaningless); the worst ratio is returned.
double worst_over_bound(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = rel * std::fabs(static_cast<double>(want[i])) + abs;
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) / bound);
  }
  return worst;
}

TEST_CASE("cuda/bf16: layer norm's host version equals the CPU fp32 kernel within bf16 rounding") {
  // Same (bf16-representable) inputs: the only difference is the output's
  // one rounding, at most half a bf16 ulp (2^-9 relative), and fp32 noise.
  const std::int64_t rows = 7, dim = 203;
  const auto x16 = to_bf16(normal(rows * dim, 1, 3.0f));
  const auto g16 = to_bf16(normal(dim, 2, 1.0f));
  const auto b16 = to_bf16(normal(dim, 3, 0.5f));
  std::vector<Bf16> y16(x16.size());
  math::host_layernorm_forward(x16.data(), g16.data(), b16.data(), y16.data(), rows, dim, 1e-5f);
  const auto x = to_float(x16), g = to_float(g16), b = to_float(b16);
  std::vector<float> want(x.size());
  cpu::layernorm_forward(x.data(), g.data(), b.data(), want.data(), rows, dim, 1e-5f);
  CHECK(worst_over_bound(to_float(y16), want, kHalfUlp, 1e-5) <= 1.0);
  // Rounding is really there: the bf16 outputs differ from fp32 somewhere.
  CHECK(to_float(y16) != want);
}

TEST_CASE("cuda/bf16: GeLU and SwiGLU element math equals the CPU fp32 kernels within bf16 rounding") {
  // Half a bf16 ulp of each value, plus 1e-5 absolute: the CPU kernels use
  // their own tanh and sigmoid approximations (about 1e-6 from tanhf and
  // expf), which show where a gradient nearly cancels.
  const std::int64_t rows = 5, f = 97;
  const auto x = to_float(to_bf16(normal(rows * 2 * f, 4, 2.0f)));
  // GeLU of every element (the first rows·f as the input).
  std::vector<float> want(static_cast<std::size_t>(rows * f)), got(want.size());
  cpu::gelu_forward(x.data(), want.data(), rows * f);
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = math::round_bf16(math::gelu(x[i]));
  CHECK(worst_over_bound(got, want, kHalfUlp, 1e-5) <= 1.0);
  // GeLU's gradient.
  const auto dy = to_float(to_bf16(normal(static_cast<std::size_t>(rows * f), 5)));
  cpu::gelu_backward(x.data(), dy.data(), want.data(), rows * f);
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = math::round_bf16(math::gelu_grad(x[i], dy[i]));
  CHECK(worst_over_bound(got, want, kHalfUlp, 1e-5) <= 1.0);
  // SwiGLU over rows of gate | up, and its gradient.
  cpu::swiglu_forward(x.data(), want.data(), rows, f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < f; ++i)
      got[static_cast<std::size_t>(r * f + i)] =
          math::round_bf16(math::swiglu(x[static_cast<std::size_t>(r * 2 * f + i)],
                                        x[static_cast<std::size_t>(r * 2 * f + f + i)]));
  CHECK(worst_over_bound(got, want, kHalfUlp, 1e-5) <= 1.0);
  std::vector<float> dgu_want(x.size()), dgu_got(x.size());
  cpu::swiglu_backward(x.data(), dy.data(), dgu_want.data(), rows, f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < f; ++i) {
      const auto gi = static_cast<std::size_t>(r * 2 * f + i), ui = gi + static_cast<std::size_t>(f);
      float dg = 0, du = 0;
      math::swiglu_grad(x[gi], x[ui], dy[static_cast<std::size_t>(r * f + i)], dg, du);
      dgu_got[gi] = math::round_bf16(dg);
      dgu_got[ui] = math::round_bf16(du);
    }
  CHECK(worst_over_bound(dgu_got, dgu_want, kHalfUlp, 1e-5) <= 1.0);
}

TEST_CASE("cuda/bf16: the causal softmax's host version is the softmax within bf16 rounding, zero above the diagonal") {
  // Against a double-precision softmax of the same bf16 scores: each
  // probability within half a bf16 ulp (plus fp32 noise); masked entries 0.
  const std::int64_t matrices = 3, seq = 37;
  auto p = to_bf16(normal(static_cast<std::size_t>(matrices * seq * seq), 6, 4.0f));
  const auto scores = to_float(p);
  math::host_causal_softmax_forward(p.data(), matrices, seq);
  const auto got = to_float(p);
  std::vector<float> want(got.size(), 0.0f);
  for (std::int64_t row = 0; row < matrices * seq; ++row) {
    const std::int64_t valid = row % seq + 1;
    double mx = -1e300, sum = 0;
    for (std::int64_t j = 0; j < valid; ++j) mx = std::max(mx, static_cast<double>(scores[static_cast<std::size_t>(row * seq + j)]));
    for (std::int64_t j = 0; j < valid; ++j) sum += std::exp(scores[static_cast<std::size_t>(row * seq + j)] - mx);
    for (std::int64_t j = 0; j < valid; ++j)
      want[static_cast<std::size_t>(row * seq + j)] =
          static_cast<float>(std::exp(scores[static_cast<std::size_t>(row * seq + j)] - mx) / sum);
  }
  CHECK(worst_over_bound(got, want, kHalfUlp, 1e-6) <= 1.0);
  for (std::int64_t row = 0; row < matrices * seq; ++row)
    for (std::int64_t j = row % seq + 1; j < seq; ++j) CHECK(got[static_cast<std::size_t>(row * seq + j)] == 0.0f);
}

}  // namespace
}  // namespace strata::backend::cuda
