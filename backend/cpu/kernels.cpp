#include "backend/cpu/kernels.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cpu/blas.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {

namespace {

// e^x in fp32 without a libm call, so loops over it vectorise: x = n·ln2 + r
// with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (relative error
// below 2e-7, fp32's own rounding), 2^n built in the exponent bits.
// Inputs are clamped to [−87, 88], where e^x stays a normal float.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// tanh(u) = 1 − 2/(e^{2u} + 1): absolute error about 1e-7.
inline float tanh_approx(float u) { return 1.0f - 2.0f / (exp_approx(2.0f * u) + 1.0f); }

inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

void check_index(std::int32_t v, std::int64_t limit, const char* what) {
  if (v < 0 || v >= limit)
    throw Error(std::string(what) + " " + std::to_string(v) + " is outside [0, " +
                std::to_string(limit) + ")");
}

}  // namespace

// --- embedding -----------------------------------------------------------------

void embedding_forward(const std::int32_t* tokens, const float* table, const float* pos,
                       float* y, std::int64_t batch, std::int64_t seq, std::int64_t hidden,
                       std::int64_t vocab) {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      const std::int64_t t = b * seq + s;
      check_index(tokens[t], vocab, "embedding: token");
      const float* e = table + tokens[t] * hidden;
      float* out = y + t * hidden;
      if (pos != nullptr) {
        const float* p = pos + s * hidden;
        for (std::int64_t i = 0; i < hidden; ++i) out[i] = e[i] + p[i];
      } else {
        std::memcpy(out, e, static_cast<std::size_t>(hidden) * sizeof(float));
      }
    }
  }
}

void embedding_backward(const std::int32_t* tokens, const float* dy, float* dtable,
                        float* dpos, std::int64_t batch, std::int64_t seq,
                        std::int64_t hidden) {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      const std::int64_t t = b * seq + s;
      const float* g = dy + t * hidden;
      if (dtable != nullptr) {
        float* de = dtable + static_cast<std::int64_t>(tokens[t]) * hidden;
        for (std::int64_t i = 0; i < hidden; ++i) de[i] += g[i];
      }
      if (dpos != nullptr) {
        float* dp = dpos + s * hidden;
        for (std::int64_t i = 0; i < hidden; ++i) dp[i] += g[i];
      }
    }
  }
}

void embedding_forward_part(const std::int32_t* tokens, const float* table, float* y,
                            std::int64_t n, std::int64_t hidden, std::int64_t vocab,
                            std::int64_t begin, std::int64_t rows) {
  for (std::int64_t t = 0; t < n; ++t) {
    check_index(tokens[t], vocab, "embedding: token");
    const std::int64_t local = tokens[t] - begin;
    float* out = y + t * hidden;
    if (local >= 0 && local < rows)
      std::memcpy(out, table + local * hidden, static_cast<std::size_t>(hidden) * sizeof(float));
    else
      std::memset(out, 0, static_cast<std::size_t>(hidden) * sizeof(float));
  }
}

void embedding_backward_part(const std::int32_t* tokens, const float* dy, float* dtable,
                             std::int64_t n, std::int64_t hidden, std::int64_t begin,
                             std::int64_t rows) {
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t local = tokens[t] - begin;
    if (local < 0 || local >= rows) continue;
    const float* g = dy + t * hidden;
    float* de = dtable + local * hidden;
    for (std::int64_t i = 0; i < hidden; ++i) de[i] += g[i];
  }
}

void add_positions(float* y, const float* pos, std::int64_t n, std::int64_t first_row,
                   std::int64_t seq, std::int64_t hidden, const std::int32_t* positions) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* p = pos + static_cast<std::int64_t>(positions[(first_row + r) % seq]) * hidden;
    float* out = y + r * hidden;
    for (std::int64_t i = 0; i < hidden; ++i) out[i] += p[i];
  }
}

void add_position_grads(const float* dy, float* dpos, std::int64_t n, std::int64_t first_row,
                        std::int64_t seq, std::int64_t hidden, const std::int32_t* positions) {
  for (std::int64_t r = 0; r < n; ++r) {
    float* dp = dpos + static_cast<std::int64_t>(positions[(first_row + r) % seq]) * hidden;
    const float* g = dy + r * hidden;
    for (std::int64_t i = 0; i < hidden; ++i) dp[i] += g[i];
  }
}

// --- norms ---------------------------------------------------------------------

namespace {
// Mean and 1/sqrt(var + eps) of one row, accumulated in double.
void row_moments(const float* x, std::int64_t dim, float eps, float& mean, float& rstd) {
  double s = 0.0;
  for (std::int64_t i = 0; i < dim; ++i) s += x[i];
  const double m = s / static_cast<double>(dim);
  double v = 0.0;
  for (std::int64_t i = 0; i < dim; ++i) {
    const double d = x[i] - m;
    v += d * d;
  }
  mean = static_cast<float>(m);
  rstd = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(dim) + eps));
}
float row_rrms(const float* x, std::int64_t dim, float eps) {
  double s = 0.0;
  for (std::int64_t i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(s / static_cast<double>(dim) + eps));
}
}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       std::int64_t rows, std::int64_t dim, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float mean = 0.0f, rstd = 0.0f;
    row_moments(xr, dim, eps, mean, rstd);
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* dy, float* dx,
                        float* dgamma, float* dbeta, std::int64_t rows, std::int64_t dim,
                        float eps) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* g = dy + r * dim;
    float* dxr = dx + r * dim;
    float mean = 0.0f, rstd = 0.0f;
    row_moments(xr, dim, eps, mean, rstd);
    // dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = dy·gamma.
    double sum_g = 0.0, sum_gx = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mean) * rstd;
      const float gh = g[i] * gamma[i];
      sum_g += gh;
      sum_gx += static_cast<double>(gh) * xhat;
      dgamma[i] += g[i] * xhat;
      dbeta[i] += g[i];
    }
    const auto mg = static_cast<float>(sum_g * inv_dim);
    const auto mgx = static_cast<float>(sum_gx * inv_dim);
    for (std::int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mean) * rstd;
      dxr[i] += rstd * (g[i] * gamma[i] - mg - xhat * mgx);
    }
  }
}

void rmsnorm_forward(const float* x, const float* gamma, float* y, std::int64_t rows,
                     std::int64_t dim, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float rr = row_rrms(xr, dim, eps);
    for (std::int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * rr * gamma[i];
  }
}

void rmsnorm_backward(const float* x, const float* gamma, const float* dy, float* dx,
                      float* dgamma, std::int64_t rows, std::int64_t dim, float eps) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* g = dy + r * dim;
    float* dxr = dx + r * dim;
    const float rr = row_rrms(xr, dim, eps);
    // dx = rr·(ĝ − x̂·mean(ĝ·x̂)), x̂ = x·rr, ĝ = dy·gamma.
    double sum_gx = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) {
      const float xhat = xr[i] * rr;
      sum_gx += static_cast<double>(g[i] * gamma[i]) * xhat;
      dgamma[i] += g[i] * xhat;
    }
    const auto mgx = static_cast<float>(sum_gx * inv_dim);
    for (std::int64_t i = 0; i < dim; ++i)
      dxr[i] += rr * (g[i] * gamma[i] - xr[i] * rr * mgx);
  }
}

// --- linear --------------------------------------------------------------------

void linear_forward(const float* x, const float* w, const float* b, float* y, std::int64_t n,
                    std::int64_t in, std::int64_t out, WeightLayout layout, bool accumulate) {
  float beta = accumulate ? 1.0f : 0.0f;
  if (b != nullptr) {
    for (std::int64_t r = 0; r < n; ++r) {
      float* yr = y + r * out;
      if (accumulate)
        for (std::int64_t j = 0; j < out; ++j) yr[j] += b[j];
      else
        std::memcpy(yr, b, static_cast<std::size_t>(out) * sizeof(float));
    }
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)
    gemm(false, false, n, out, in, 1.0f, x, in, w, out, beta, y, out);
  else
    gemm(false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out);
}

void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     float* db, std::int64_t n, std::int64_t in, std::int64_t out,
                     WeightLayout layout, bool accumulate_dx) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  if (layout == WeightLayout::InOut) {
    if (dx != nullptr) gemm(false, true, n, in, out, 1.0f, dy, out, w, out, beta, dx, in);
    gemm(true, false, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, out);
  } else {
    if (dx != nullptr) gemm(false, false, n, in, out, 1.0f, dy, out, w, in, beta, dx, in);
    gemm(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
  }
  if (db != nullptr)
    for (std::int64_t r = 0; r < n; ++r) {
      const float* g = dy + r * out;
      for (std::int64_t j = 0; j < out; ++j) db[j] += g[j];
    }
}

// --- attention -------------------------------------------------------------------

void attention_forward(const float* qkv, float* probs, float* out, const AttentionDims& d,
                       const AttentionDropout* dropout) {
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* base = qkv + b * S * ld;
    for (std::int64_t h = 0; h < d.heads; ++h) {
      const float* q = base + h * hd;
      const float* k = base + H + h * hd;
      const float* v = base + 2 * H + h * hd;
      const std::int64_t off = (b * d.heads + h) * S * S;
      float* p = probs + off;
      gemm(false, true, S, S, hd, scale, q, ld, k, ld, 0.0f, p, S);
      for (std::int64_t i = 0; i < S; ++i) {
        float* row = p + i * S;
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) mx = std::max(mx, row[j]);
        for (std::int64_t j = 0; j <= i; ++j) row[j] = exp_approx(row[j] - mx);
        float sum = 0.0f;
        for (std::int64_t j = 0; j <= i; ++j) sum += row[j];
        const float inv = 1.0f / sum;
        for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (std::int64_t j = i + 1; j < S; ++j) row[j] = 0.0f;
      }
      const float* pv = p;
      if (dropout != nullptr) {
        dropout_apply(p, dropout->mask + off, dropout->dropped + off, S * S, dropout->p);
        pv = dropout->dropped + off;
      }
      if (out != nullptr)
        gemm(false, false, S, hd, S, 1.0f, pv, S, v, ld, 0.0f, out + b * S * H + h * hd, H);
    }
  }
}

void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                        float* scratch, const AttentionDims& d,
                        const AttentionDropout* dropout) {
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* base = qkv + b * S * ld;
    float* dbase = dqkv + b * S * ld;
    for (std::int64_t h = 0; h < d.heads; ++h) {
      const float* q = base + h * hd;
      const float* k = base + H + h * hd;
      const float* v = base + 2 * H + h * hd;
      const std::int64_t off = (b * d.heads + h) * S * S;
      const float* p = probs + off;
      const float* pv = dropout != nullptr ? dropout->dropped + off : p;  // what met V
      const float* go = dout + b * S * H + h * hd;
      // dP = dO·Vᵀ, dV = Pᵀ·dO (P after dropout), then back through the dropout.
      gemm(false, true, S, S, hd, 1.0f, go, H, v, ld, 0.0f, scratch, S);
      gemm(true, false, S, hd, S, 1.0f, pv, S, go, H, 0.0f, dbase + 2 * H + h * hd, ld);
      if (dropout != nullptr) dropout_apply(scratch, dropout->mask + off, scratch, S * S, dropout->p);
      // Softmax backward: dS = P ⊙ (dP − rowsum(P ⊙ dP)); masked P are zero.
      for (std::int64_t i = 0; i < S; ++i) {
        const float* pr = p + i * S;
        float* g = scratch + i * S;
        float dot = 0.0f;
        for (std::int64_t j = 0; j <= i; ++j) dot += pr[j] * g[j];
        for (std::int64_t j = 0; j <= i; ++j) g[j] = pr[j] * (g[j] - dot);
        for (std::int64_t j = i + 1; j < S; ++j) g[j] = 0.0f;
      }
      // Scores were QKᵀ·scale: dQ = dS·K·scale, dK = dSᵀ·Q·scale.
      gemm(false, false, S, hd, S, scale, scratch, S, k, ld, 0.0f, dbase + h * hd, ld);
      gemm(true, false, S, hd, S, scale, scratch, S, q, ld, 0.0f, dbase + H + h * hd, ld);
    }
  }
}

void attention_forward_cp(const float* qkv, const float* kv, const std::int32_t* qpos,
                          float* probs, float* out, const ContextDims& d) {
  const std::int64_t Sq = d.sq, Sk = d.sk, H = d.hidden(), hd = d.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* qb = qkv + b * Sq * 3 * H;
    const float* kb = kv + b * Sk * 2 * H;
    for (std::int64_t h = 0; h < d.heads; ++h) {
      float* p = probs + (b * d.heads + h) * Sq * Sk;
      gemm(false, true, Sq, Sk, hd, scale, qb + h * hd, 3 * H, kb + h * hd, 2 * H, 0.0f, p, Sk);
      for (std::int64_t i = 0; i < Sq; ++i) {
        float* row = p + i * Sk;
        const std::int64_t last = qpos[i];
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j <= last; ++j) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (std::int64_t j = 0; j <= last; ++j) {
          row[j] = exp_approx(row[j] - mx);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (std::int64_t j = 0; j <= last; ++j) row[j] *= inv;
        for (std::int64_t j = last + 1; j < Sk; ++j) row[j] = 0.0f;
      }
      if (out != nullptr)
        gemm(false, false, Sq, hd, Sk, 1.0f, p, Sk, kb + H + h * hd, 2 * H, 0.0f,
             out + b * Sq * H + h * hd, H);
    }
  }
}

void attention_backward_cp(const float* qkv, const float* kv, const std::int32_t* qpos,
                           const float* probs, const float* dout, float* dqkv, float* dkv,
                           float* scratch, const ContextDims& d) {
  const std::int64_t Sq = d.sq, Sk = d.sk, H = d.hidden(), hd = d.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* qb = qkv + b * Sq * 3 * H;
    const float* kb = kv + b * Sk * 2 * H;
    float* dqb = dqkv + b * Sq * 3 * H;
    float* dkb = dkv + b * Sk * 2 * H;
    for (std::int64_t h = 0; h < d.heads; ++h) {
      const float* p = probs + (b * d.heads + h) * Sq * Sk;
      const float* go = dout + b * Sq * H + h * hd;
      // dP = dO·Vᵀ; dV = Pᵀ·dO over this rank's queries.
      gemm(false, true, Sq, Sk, hd, 1.0f, go, H, kb + H + h * hd, 2 * H, 0.0f, scratch, Sk);
      gemm(true, false, Sk, hd, Sq, 1.0f, p, Sk, go, H, 0.0f, dkb + H + h * hd, 2 * H);
      for (std::int64_t i = 0; i < Sq; ++i) {
        const float* pr = p + i * Sk;
        float* g = scratch + i * Sk;
        const std::int64_t last = qpos[i];
        float dot = 0.0f;
        for (std::int64_t j = 0; j <= last; ++j) dot += pr[j] * g[j];
        for (std::int64_t j = 0; j <= last; ++j) g[j] = pr[j] * (g[j] - dot);
        for (std::int64_t j = last + 1; j < Sk; ++j) g[j] = 0.0f;
      }
      gemm(false, false, Sq, hd, Sk, scale, scratch, Sk, kb + h * hd, 2 * H, 0.0f, dqb + h * hd,
           3 * H);
      gemm(true, false, Sk, hd, Sq, scale, scratch, Sk, qb + h * hd, 3 * H, 0.0f, dkb + h * hd,
           2 * H);
    }
  }
}

// --- dropout -----------------------------------------------------------------------

void dropout_mask(std::uint8_t* mask, std::int64_t n, float p, std::uint64_t seed) {
  if (!(p >= 0.0f && p < 1.0f))
    throw Error("dropout: probability " + std::to_string(p) + " is outside [0, 1)");
  // Keep when the top 32 bits of splitmix64(seed ⊕ i) reach p·2³².
  const auto threshold = static_cast<std::uint64_t>(static_cast<double>(p) * 4294967296.0);
  const std::uint64_t key = seed * 0x9e3779b97f4a7c15ULL;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = key + static_cast<std::uint64_t>(i) * 0xd1b54a32d192ed03ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    mask[i] = (z >> 32) >= threshold ? 1 : 0;
  }
}

void dropout_apply(const float* x, const std::uint8_t* mask, float* y, std::int64_t n, float p) {
  const float keep_scale = 1.0f / (1.0f - p);
  for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] * keep_scale : 0.0f;
}

// --- activations -------------------------------------------------------------------

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;
}  // namespace

void gelu_forward(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_approx(kGeluC * (v + kGeluA * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = tanh_approx(kGeluC * (v + kGeluA * v * v * v));
    const float dt = kGeluC * (1.0f + 3.0f * kGeluA * v * v) * (1.0f - t * t);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

void swiglu_forward(const float* gu, float* y, std::int64_t rows, std::int64_t f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * f;
    const float* u = g + f;
    float* yr = y + r * f;
    for (std::int64_t i = 0; i < f; ++i) {
      const float sig = sigmoid_approx(g[i]);
      yr[i] = g[i] * sig * u[i];
    }
  }
}

void swiglu_backward(const float* gu, const float* dy, float* dgu, std::int64_t rows,
                     std::int64_t f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * f;
    const float* u = g + f;
    const float* d = dy + r * f;
    float* dg = dgu + r * 2 * f;
    float* du = dg + f;
    for (std::int64_t i = 0; i < f; ++i) {
      const float sig = sigmoid_approx(g[i]);
      const float silu = g[i] * sig;
      du[i] = d[i] * silu;
      dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    }
  }
}

void residual_forward(const float* a, const float* b, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// --- loss --------------------------------------------------------------------------

double cross_entropy_forward(float* logits, const std::int32_t* targets, std::int64_t n,
                             std::int64_t vocab) {
  double loss = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    check_index(targets[r], vocab, "cross_entropy: target");
    float* row = logits + r * vocab;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < vocab; ++j) mx = std::max(mx, row[j]);
    const float target_logit = row[targets[r]];
    for (std::int64_t j = 0; j < vocab; ++j) row[j] = exp_approx(row[j] - mx);
    double sum = 0.0;
    for (std::int64_t j = 0; j < vocab; ++j) sum += row[j];
    const auto inv = static_cast<float>(1.0 / sum);
    for (std::int64_t j = 0; j < vocab; ++j) row[j] *= inv;
    loss += std::log(sum) + mx - target_logit;
  }
  return loss;
}

void cross_entropy_backward(float* probs, const std::int32_t* targets, std::int64_t n,
                            std::int64_t vocab, float scale, std::int64_t vocab_begin) {
  for (std::int64_t r = 0; r < n; ++r) {
    float* row = probs + r * vocab;
    const std::int64_t t = targets[r] - vocab_begin;
    if (t >= 0 && t < vocab) row[t] -= 1.0f;
    for (std::int64_t j = 0; j < vocab; ++j) row[j] *= scale;
  }
}

void row_max(const float* logits, std::int64_t n, std::int64_t vocab, float* mx) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* row = logits + r * vocab;
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < vocab; ++j) m = std::max(m, row[j]);
    mx[r] = m;
  }
}

void exp_shifted_sums(float* logits, const std::int32_t* targets, std::int64_t n,
                      std::int64_t vocab, std::int64_t vocab_begin, std::int64_t whole_vocab,
                      const float* mx, float* sums) {
  for (std::int64_t r = 0; r < n; ++r) {
    check_index(targets[r], whole_vocab, "cross_entropy: target");
    float* row = logits + r * vocab;
    const std::int64_t t = targets[r] - vocab_begin;
    sums[n + r] = t >= 0 && t < vocab ? row[t] - mx[r] : 0.0f;
    double sum = 0.0;
    for (std::int64_t j = 0; j < vocab; ++j) {
      row[j] = exp_approx(row[j] - mx[r]);
      sum += row[j];
    }
    sums[r] = static_cast<float>(sum);
  }
}

double normalize_rows(float* logits, std::int64_t n, std::int64_t vocab, const float* sums) {
  double loss = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    float* row = logits + r * vocab;
    const float inv = 1.0f / sums[r];
    for (std::int64_t j = 0; j < vocab; ++j) row[j] *= inv;
    loss += std::log(static_cast<double>(sums[r])) - static_cast<double>(sums[n + r]);
  }
  return loss;
}

std::int64_t first_non_finite(const float* x, std::int64_t n) {
  // One pass that vectorizes: x − x is 0 for finite x and NaN otherwise.
  float acc = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) acc += x[i] - x[i];
  if (acc == 0.0f) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

}  // namespace strata::backend::cpu
