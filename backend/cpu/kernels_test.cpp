#include "backend/cpu/kernels.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/test_util.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {
namespace {

using test::check_grad;
using test::dot;
using test::random_vec;

TEST_CASE("cpu/kernels: linear: y = xW + b and its backward match finite differences, both layouts") {
  // Gradients of Σ w·y by central differences; dx accumulates on request and
  // parameter gradients always do, so a preset value must survive.
  Rng rng(1);
  const std::int64_t n = 3, in = 4, out = 5;
  for (auto layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    auto x = random_vec(n * in, rng), w = random_vec(in * out, rng), b = random_vec(out, rng);
    const auto wy = random_vec(n * out, rng);
    auto f = [&] {
      std::vector<float> y(n * out);
      linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, out, layout, false);
      return dot(wy, y);
    };
    std::vector<float> dx(n * in, 0.5f), dw(in * out, 0.25f), db(out, -1.0f);
    linear_backward(x.data(), w.data(), wy.data(), dx.data(), dw.data(), db.data(), n, in, out,
                    layout, true);
    for (auto& v : dx) v -= 0.5f;
    for (auto& v : dw) v -= 0.25f;
    for (auto& v : db) v += 1.0f;
    check_grad("dx", x, dx, f);
    check_grad("dw", w, dw, f);
    check_grad("db", b, db, f);
  }
  // y = 1·[1 2] + [10 20] for x = [1], W = [1 2]; accumulate adds onto y.
  const float x1 = 1.0f, w1[2] = {1.0f, 2.0f}, b1[2] = {10.0f, 20.0f};
  float y[2] = {100.0f, 100.0f};
  linear_forward(&x1, w1, b1, y, 1, 1, 2, WeightLayout::InOut, true);
  CHECK(y[0] == 111.0f);
  CHECK(y[1] == 122.0f);
}

TEST_CASE("cpu/kernels: layer norm and RMS norm: backward matches finite differences") {
  // Norms accumulate dx into the residual gradient: a preset 1 stays added.
  Rng rng(2);
  const std::int64_t rows = 3, dim = 8;
  auto x = random_vec(rows * dim, rng), gamma = random_vec(dim, rng), beta = random_vec(dim, rng);
  const auto wy = random_vec(rows * dim, rng);
  {
    auto f = [&] {
      std::vector<float> y(rows * dim);
      layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), rows, dim, 1e-5f);
      return dot(wy, y);
    };
    std::vector<float> dx(rows * dim, 1.0f), dg(dim), db(dim);
    layernorm_backward(x.data(), gamma.data(), wy.data(), dx.data(), dg.data(), db.data(), rows,
                       dim, 1e-5f);
    for (auto& v : dx) v -= 1.0f;
    check_grad("layernorm dx", x, dx, f);
    check_grad("layernorm dgamma", gamma, dg, f);
    check_grad("layernorm dbeta", beta, db, f);
    // Normalised rows: mean 0 and variance 1 before gain and bias.
    std::vector<float> ones(dim, 1.0f), zeros(dim, 0.0f), y(rows * dim);
    layernorm_forward(x.data(), ones.data(), zeros.data(), y.data(), rows, dim, 0.0f);
    double m = 0, v = 0;
    for (std::int64_t i = 0; i < dim; ++i) m += y[i];
    for (std::int64_t i = 0; i < dim; ++i) v += y[i] * y[i];
    CHECK(m / dim == doctest::Approx(0.0).epsilon(1e-6));
    CHECK(v / dim == doctest::Approx(1.0).epsilon(1e-5));
  }
  {
    auto f = [&] {
      std::vector<float> y(rows * dim);
      rmsnorm_forward(x.data(), gamma.data(), y.data(), rows, dim, 1e-5f);
      return dot(wy, y);
    };
    std::vector<float> dx(rows * dim, 1.0f), dg(dim);
    rmsnorm_backward(x.data(), gamma.data(), wy.data(), dx.data(), dg.data(), rows, dim, 1e-5f);
    for (auto& v : dx) v -= 1.0f;
    check_grad("rmsnorm dx", x, dx, f);
    check_grad("rmsnorm dgamma", gamma, dg, f);
  }
}

TEST_CASE("cpu/kernels: causal attention: rows of P sum to 1 over past keys, backward matches finite differences") {
  // P is lower triangular with rows summing to 1; changing a later token's
  // Q, K or V leaves earlier outputs unchanged; dQKV by central differences.
  Rng rng(3);
  const AttentionDims d{2, 5, 2, 3};
  const std::int64_t N = d.batch * d.seq, H = d.hidden();
  auto qkv = random_vec(N * 3 * H, rng);
  const auto wy = random_vec(N * H, rng);
  std::vector<float> probs(d.batch * d.heads * d.seq * d.seq), out(N * H);
  auto f = [&] {
    attention_forward(qkv.data(), probs.data(), out.data(), d);
    return dot(wy, out);
  };
  f();
  for (std::int64_t r = 0; r < d.batch * d.heads * d.seq; ++r) {
    const std::int64_t i = r % d.seq;
    double s = 0.0;
    for (std::int64_t j = 0; j < d.seq; ++j) {
      s += probs[r * d.seq + j];
      if (j > i) CHECK(probs[r * d.seq + j] == 0.0f);
    }
    CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
  }
  const auto before = out;
  for (std::int64_t c = 0; c < 3 * H; ++c) qkv[(d.seq - 1) * 3 * H + c] += 1.0f;  // last token, seq 0
  f();
  for (std::int64_t t = 0; t + 1 < d.seq; ++t)
    for (std::int64_t c = 0; c < H; ++c) CHECK(out[t * H + c] == before[t * H + c]);
  for (std::int64_t c = 0; c < 3 * H; ++c) qkv[(d.seq - 1) * 3 * H + c] -= 1.0f;

  f();
  std::vector<float> dqkv(qkv.size()), scratch(d.seq * d.seq);
  attention_backward(qkv.data(), probs.data(), wy.data(), dqkv.data(), scratch.data(), d);
  check_grad("attention dqkv", qkv, dqkv, f);
}

TEST_CASE("cpu/kernels: dropout masks drop a fraction p, deterministically, and attention backward goes through them") {
  // 100 000 draws at p = 0.25 drop 25 % ± 0.5 % (6 standard errors); the
  // same seed gives the same mask, another seed another; kept values scale
  // by 1/(1 − p); dQKV with attention dropout by finite differences.
  const std::int64_t n = 100000;
  std::vector<std::uint8_t> m1(n), m2(n), m3(n);
  dropout_mask(m1.data(), n, 0.25f, 7);
  dropout_mask(m2.data(), n, 0.25f, 7);
  dropout_mask(m3.data(), n, 0.25f, 8);
  std::int64_t dropped = 0;
  for (auto v : m1) dropped += v == 0;
  CHECK(static_cast<double>(dropped) / n == doctest::Approx(0.25).epsilon(0.02));
  CHECK(m1 == m2);
  CHECK(m1 != m3);
  const float x[2] = {3.0f, 5.0f};
  const std::uint8_t keep[2] = {1, 0};
  float y[2];
  dropout_apply(x, keep, y, 2, 0.25f);
  CHECK(y[0] == 4.0f);
  CHECK(y[1] == 0.0f);
  CHECK_THROWS_AS(dropout_mask(m1.data(), n, 1.0f, 1), Error);

  Rng rng(13);
  const AttentionDims d{1, 6, 2, 2};
  const std::int64_t N = d.batch * d.seq, H = d.hidden(), P = d.batch * d.heads * d.seq * d.seq;
  auto qkv = random_vec(N * 3 * H, rng);
  const auto wy = random_vec(N * H, rng);
  std::vector<std::uint8_t> mask(P);
  dropout_mask(mask.data(), P, 0.3f, 3);
  std::vector<float> probs(P), dropped_p(P), out(N * H);
  const AttentionDropout ad{mask.data(), dropped_p.data(), 0.3f};
  auto f = [&] {
    attention_forward(qkv.data(), probs.data(), out.data(), d, &ad);
    return dot(wy, out);
  };
  f();
  std::vector<float> dqkv(qkv.size()), scratch(d.seq * d.seq);
  attention_backward(qkv.data(), probs.data(), wy.data(), dqkv.data(), scratch.data(), d, &ad);
  check_grad("attention with dropout dqkv", qkv, dqkv, f);
}

TEST_CASE("cpu/kernels: GeLU (tanh) and SwiGLU: closed-form values and finite-difference backward") {
  // gelu(1) = 0.5·(1 + tanh(sqrt(2/π)·1.044715)) = 0.8411920; gelu(0) = 0;
  // silu(1)·2 = 2/(1 + e⁻¹) = 1.4621172.
  const float xs[3] = {1.0f, 0.0f, -1.0f};
  float ys[3];
  gelu_forward(xs, ys, 3);
  CHECK(ys[0] == doctest::Approx(0.8411920).epsilon(1e-6));
  CHECK(ys[1] == 0.0f);
  CHECK(ys[2] == doctest::Approx(-0.1588080).epsilon(1e-5));
  const float gu[2] = {1.0f, 2.0f};
  float y1 = 0.0f;
  swiglu_forward(gu, &y1, 1, 1);
  CHECK(y1 == doctest::Approx(1.4621172).epsilon(1e-6));

  Rng rng(4);
  const std::int64_t rows = 3, f = 4;
  auto x = random_vec(rows * f, rng, 2.0);
  const auto wy = random_vec(rows * f, rng);
  auto fg = [&] {
    std::vector<float> y(x.size());
    gelu_forward(x.data(), y.data(), rows * f);
    return dot(wy, y);
  };
  std::vector<float> dx = wy;  // in place, as the model calls it
  gelu_backward(x.data(), dx.data(), dx.data(), rows * f);
  check_grad("gelu dx", x, dx, fg, 1e-3f);

  auto g2 = random_vec(rows * 2 * f, rng, 2.0);
  auto fs = [&] {
    std::vector<float> y(rows * f);
    swiglu_forward(g2.data(), y.data(), rows, f);
    return dot(wy, y);
  };
  std::vector<float> dg(g2.size());
  swiglu_backward(g2.data(), wy.data(), dg.data(), rows, f);
  check_grad("swiglu dgu", g2, dg, fs, 1e-3f);
}

TEST_CASE("cpu/kernels: embedding with positions: lookup, scatter-add backward, range check") {
  // y[t] = E[token] + P[pos]; a token used twice gets both gradients summed.
  const std::int64_t V = 3, h = 2, S = 2, B = 2;
  const std::vector<float> E = {0, 1, 10, 11, 20, 21}, P = {100, 200, 300, 400};
  const std::int32_t tok[4] = {2, 0, 2, 1};
  std::vector<float> y(B * S * h);
  embedding_forward(tok, E.data(), P.data(), y.data(), B, S, h, V);
  CHECK(y == std::vector<float>{120, 221, 300, 401, 120, 221, 310, 411});
  std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7, 8}, dE(V * h), dP(S * h);
  embedding_backward(tok, dy.data(), dE.data(), dP.data(), B, S, h);
  CHECK(dE == std::vector<float>{3, 4, 7, 8, 6, 8});
  CHECK(dP == std::vector<float>{6, 8, 10, 12});
  const std::int32_t bad[1] = {3};
  CHECK_THROWS_AS(embedding_forward(bad, E.data(), nullptr, y.data(), 1, 1, h, V), Error);
}

TEST_CASE("cpu/kernels: cross-entropy: uniform logits cost log V, the gradient is softmax minus one-hot") {
  // Equal logits give loss log V per row; backward matches central differences.
  const std::int64_t n = 2, V = 5;
  std::vector<float> z(n * V, 0.3f);
  const std::int32_t t[2] = {1, 4};
  CHECK(cross_entropy_forward(z.data(), t, n, V) == doctest::Approx(2.0 * std::log(5.0)));
  const std::int32_t bad[2] = {1, 5};
  CHECK_THROWS_AS(cross_entropy_forward(z.data(), bad, n, V), Error);

  Rng rng(5);
  auto logits = random_vec(n * V, rng);
  auto f = [&] {
    auto tmp = logits;
    return cross_entropy_forward(tmp.data(), t, n, V) / static_cast<double>(n);
  };
  auto g = logits;
  cross_entropy_forward(g.data(), t, n, V);
  cross_entropy_backward(g.data(), t, n, V, 1.0f / static_cast<float>(n));
  check_grad("cross-entropy dlogits", logits, g, f, 1e-2f, 5e-4);
}

}  // namespace
TEST_CASE("cpu/kernels: first_non_finite finds the first NaN or infinity, -1 when none") {
  std::vector<float> x(1000, 1.5f);
  CHECK(first_non_finite(x.data(), 1000) == -1);
  x[700] = std::numeric_limits<float>::infinity();
  x[900] = std::numeric_limits<float>::quiet_NaN();
  CHECK(first_non_finite(x.data(), 1000) == 700);
  CHECK(first_non_finite(x.data() + 701, 299) == 199);
  x[3] = -std::numeric_limits<float>::infinity();
  CHECK(first_non_finite(x.data(), 1000) == 3);
  // The largest finite values are finite (their x − x is 0).
  std::vector<float> big(8, std::numeric_limits<float>::max());
  CHECK(first_non_finite(big.data(), 8) == -1);
}

}  // namespace strata::backend::cpu
