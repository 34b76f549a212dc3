#include "backend/cuda/ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_bf16.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

void linear_forward(const Ctx& c, const float* x, const float* w, const float* b, float* y,
                    std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout,
                    bool accumulate) {
  float beta = accumulate ? 1.0f : 0.0f;
  if (b != nullptr) {
    kernels::broadcast_rows(c.stream, b, y, n, out, accumulate);
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)
    c.blas->gemm(c.stream, false, false, n, out, in, 1.0f, x, in, w, out, beta, y, out);
  else
    c.blas->gemm(c.stream, false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out);
}

void linear_backward(const Ctx& c, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* db, std::int64_t n, std::int64_t in, std::int64_t out,
                     WeightLayout layout, bool accumulate_dx) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  Blas& b = *c.blas;
  if (layout == WeightLayout::InOut) {
    if (dx != nullptr) b.gemm(c.stream, false, true, n, in, out, 1.0f, dy, out, w, out, beta, dx, in);
    b.gemm(c.stream, true, false, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, out);
  } else {
    if (dx != nullptr) b.gemm(c.stream, false, false, n, in, out, 1.0f, dy, out, w, in, beta, dx, in);
    b.gemm(c.stream, true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
  }
  if (db != nullptr) kernels::add_column_sums(c.stream, dy, n, out, db);
}

// Per sequence b, head h: Q, K, V are columns h·hd, H + h·hd, 2H + h·hd of
// the [seq × 3H] rows (leading dimension 3H, next head hd further on); the
// output's head h is columns h·hd of [seq × H]; P is matrix b·heads + h.
void attention_forward(const Ctx& c, const float* qkv, float* probs, float* out,
                       const AttentionDims& d) {
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H, SS = S * S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* q = qkv + b * S * ld;
    float* p = probs + b * d.heads * SS;
    c.blas->gemm_batched(c.stream, false, true, S, S, hd, scale, q, ld, q + H, ld, 0.0f, p, S,
                         {hd, hd, SS, d.heads});
  }
  kernels::causal_softmax_forward(c.stream, probs, d.batch * d.heads, S);
  if (out == nullptr) return;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* v = qkv + b * S * ld + 2 * H;
    c.blas->gemm_batched(c.stream, false, false, S, hd, S, 1.0f, probs + b * d.heads * SS, S, v, ld,
                         0.0f, out + b * S * H, H, {SS, hd, hd, d.heads});
  }
}

void attention_backward(const Ctx& c, const float* qkv, const float* probs, const float* dout,
                        float* dqkv, float* scratch, std::int64_t scratch_heads,
                        const AttentionDims& d) {
  if (scratch_heads < 1 || scratch_heads > d.heads)
    throw Error("attention_backward: scratch for " + std::to_string(scratch_heads) +
                " heads (need 1 to " + std::to_string(d.heads) + ")");
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H, SS = S * S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Blas& bl = *c.blas;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const float* base = qkv + b * S * ld;
    float* dbase = dqkv + b * S * ld;
    const float* go = dout + b * S * H;
    const float* p = probs + b * d.heads * SS;
    // dV = Pᵀ·dO, every head at once.
    bl.gemm_batched(c.stream, true, false, S, hd, S, 1.0f, p, S, go, H, 0.0f, dbase + 2 * H, ld,
                    {SS, hd, hd, d.heads});
    for (std::int64_t h0 = 0; h0 < d.heads; h0 += scratch_heads) {
      const std::int64_t g = std::min(scratch_heads, d.heads - h0);
      // dP = dO·Vᵀ, then dS = P ⊙ (dP − rowsum(P ⊙ dP)) in place.
      bl.gemm_batched(c.stream, false, true, S, S, hd, 1.0f, go + h0 * hd, H, base + 2 * H + h0 * hd,
                      ld, 0.0f, scratch, S, {hd, hd, SS, g});
      kernels::causal_softmax_backward(c.stream, p + h0 * SS, scratch, g, S);
      // Scores were QKᵀ·scale: dQ = dS·K·scale, dK = dSᵀ·Q·scale.
      bl.gemm_batched(c.stream, false, false, S, hd, S, scale, scratch, S, base + H + h0 * hd, ld,
                      0.0f, dbase + h0 * hd, ld, {SS, hd, hd, g});
      bl.gemm_batched(c.stream, true, false, S, hd, S, scale, scratch, S, base + h0 * hd, ld, 0.0f,
                      dbase + H + h0 * hd, ld, {SS, hd, hd, g});
    }
  }
}

// --- bf16: the fp32 functions above with Blas::gemm_bf16 and the bf16 kernels ---

void linear_forward(const Ctx& c, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y, std::int64_t n,
                    std::int64_t in, std::int64_t out, WeightLayout layout, bool accumulate) {
  float beta = accumulate ? 1.0f : 0.0f;
  if (b != nullptr) {
    kernels::broadcast_rows(c.stream, b, y, n, out, accumulate);
    beta = 1.0f;
  }
  if (layout == WeightLayout::InOut)
    c.blas->gemm_bf16(c.stream, false, false, n, out, in, 1.0f, x, in, w, out, beta, y, out, false);
  else
    c.blas->gemm_bf16(c.stream, false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out, false);
}

void linear_forward(const Ctx& c, const Bf16* x, const Bf16* w, std::nullptr_t, float* y, std::int64_t n,
                    std::int64_t in, std::int64_t out, WeightLayout layout, bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (layout == WeightLayout::InOut)
    c.blas->gemm_bf16(c.stream, false, false, n, out, in, 1.0f, x, in, w, out, beta, y, out, true);
  else
    c.blas->gemm_bf16(c.stream, false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out, true);
}

void linear_backward(const Ctx& c, const Bf16* x, const Bf16* w, const Bf16* dy, Bf16* dx, float* dw, float* db,
                     std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout, bool accumulate_dx) {
  const float beta = accumulate_dx ? 1.0f : 0.0f;
  Blas& b = *c.blas;
  if (layout == WeightLayout::InOut) {
    if (dx != nullptr) b.gemm_bf16(c.stream, false, true, n, in, out, 1.0f, dy, out, w, out, beta, dx, in, false);
    b.gemm_bf16(c.stream, true, false, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, out, true);
  } else {
    if (dx != nullptr) b.gemm_bf16(c.stream, false, false, n, in, out, 1.0f, dy, out, w, in, beta, dx, in, false);
    b.gemm_bf16(c.stream, true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in, true);
  }
  if (db != nullptr) kernels::add_column_sums(c.stream, dy, n, out, db);
}

void attention_forward(const Ctx& c, const Bf16* qkv, Bf16* probs, Bf16* out, const AttentionDims& d) {
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H, SS = S * S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const Bf16* q = qkv + b * S * ld;
    Bf16* p = probs + b * d.heads * SS;
    c.blas->gemm_bf16(c.stream, false, true, S, S, hd, scale, q, ld, q + H, ld, 0.0f, p, S, false,
                      {hd, hd, SS, d.heads});
  }
  kernels::causal_softmax_forward(c.stream, probs, d.batch * d.heads, S);
  if (out == nullptr) return;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const Bf16* v = qkv + b * S * ld + 2 * H;
    c.blas->gemm_bf16(c.stream, false, false, S, hd, S, 1.0f, probs + b * d.heads * SS, S, v, ld, 0.0f,
                      out + b * S * H, H, false, {SS, hd, hd, d.heads});
  }
}

void attention_backward(const Ctx& c, const Bf16* qkv, const Bf16* probs, const Bf16* dout, Bf16* dqkv,
                        Bf16* scratch, std::int64_t scratch_heads, const AttentionDims& d) {
  if (scratch_heads < 1 || scratch_heads > d.heads)
    throw Error("attention_backward: scratch for " + std::to_string(scratch_heads) + " heads (need 1 to " +
                std::to_string(d.heads) + ")");
  const std::int64_t S = d.seq, H = d.hidden(), hd = d.head_dim, ld = 3 * H, SS = S * S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Blas& bl = *c.blas;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const Bf16* base = qkv + b * S * ld;
    Bf16* dbase = dqkv + b * S * ld;
    const Bf16* go = dout + b * S * H;
    const Bf16* p = probs + b * d.heads * SS;
    bl.gemm_bf16(c.stream, true, false, S, hd, S, 1.0f, p, S, go, H, 0.0f, dbase + 2 * H, ld, false,
                 {SS, hd, hd, d.heads});
    for (std::int64_t h0 = 0; h0 < d.heads; h0 += scratch_heads) {
      const std::int64_t g = std::min(scratch_heads, d.heads - h0);
      bl.gemm_bf16(c.stream, false, true, S, S, hd, 1.0f, go + h0 * hd, H, base + 2 * H + h0 * hd, ld, 0.0f,
                   scratch, S, false, {hd, hd, SS, g});
      kernels::causal_softmax_backward(c.stream, p + h0 * SS, scratch, g, S);
      bl.gemm_bf16(c.stream, false, false, S, hd, S, scale, scratch, S, base + H + h0 * hd, ld, 0.0f,
                   dbase + h0 * hd, ld, false, {SS, hd, hd, g});
      bl.gemm_bf16(c.stream, true, false, S, hd, S, scale, scratch, S, base + h0 * hd, ld, 0.0f,
                   dbase + H + h0 * hd, ld, false, {SS, hd, hd, g});
    }
  }
}

}  // namespace strata::backend::cuda
