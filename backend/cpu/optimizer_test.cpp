#include "backend/cpu/optimizer.hpp"

#include <doctest/doctest.h>

#include "tests/testing.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "backend/cpu/gpt.hpp"
#include "backend/common/rng.hpp"
#include "costmodel/ops.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"

namespace strata::backend::cpu {
namespace {

// Two parameters p = [1, −2]; step 1 sees g = [0.5, −1], step 2 g = [0.1, 0.2].
struct TwoSteps {
  TrackingAllocator alloc;
  std::vector<Tensor> p, g;
  TwoSteps() {
    p.emplace_back(alloc, Shape{2}, MemTag::Params);
    g.emplace_back(alloc, Shape{2}, MemTag::Grads);
    p[0][0] = 1.0f;
    p[0][1] = -2.0f;
  }
  void run(Optimizer& opt, float a1, float b1, float a2, float b2) {
    g[0][0] = 0.5f;
    g[0][1] = -1.0f;
    opt.step(p, g);
    CHECK(p[0][0] == doctest::Approx(a1).epsilon(1e-6));
    CHECK(p[0][1] == doctest::Approx(b1).epsilon(1e-6));
    g[0][0] = 0.1f;
    g[0][1] = 0.2f;
    opt.step(p, g);
    CHECK(p[0][0] == doctest::Approx(a2).epsilon(1e-6));
    CHECK(p[0][1] == doctest::Approx(b2).epsilon(1e-6));
  }
};

TEST_CASE("cpu/optimizer: SGD and momentum: two steps by hand") {
  // SGD, lr 0.1: p₁ = p − 0.1·g₁ = [0.95, −1.9]; p₂ = p₁ − 0.1·g₂ = [0.94, −1.92].
  // Momentum 0.9: v₁ = g₁, p₁ as above; v₂ = 0.9·v₁ + g₂ = [0.55, −0.7],
  // p₂ = p₁ − 0.1·v₂ = [0.895, −1.83].
  {
    TwoSteps t;
    Sgd sgd(t.alloc, {.lr = 0.1f});
    t.run(sgd, 0.95f, -1.9f, 0.94f, -1.92f);
    CHECK(t.alloc.stats().current[static_cast<int>(MemTag::OptimizerStates)] == 0);
  }
  {
    TwoSteps t;
    Sgd mom(t.alloc, {.lr = 0.1f, .momentum = 0.9f});
    t.run(mom, 0.95f, -1.9f, 0.895f, -1.83f);
    // One velocity per parameter element, fp32.
    CHECK(t.alloc.stats().current[static_cast<int>(MemTag::OptimizerStates)] == 8);
  }
}

TEST_CASE("cpu/optimizer: Adam and AdamW: two steps by hand") {
  // lr 0.1, β = (0.9, 0.999), eps 1e-8. Step 1: m̂ = g, v̂ = g², so
  // p₁ = p − 0.1·sign(g) = [0.9, −1.9]. Step 2: m = 0.9·0.1·g₁ + 0.1·g₂ =
  // [0.055, −0.07], v = 0.999·0.001·g₁² + 0.001·g₂² = [0.00025975, 0.001039];
  // p₂ = p₁ − 0.1·(m/0.19)/sqrt(v/0.001999) = [0.819695906, −1.848897394].
  {
    TwoSteps t;
    Adam adam(t.alloc, {.lr = 0.1f});
    t.run(adam, 0.9f, -1.9f, 0.819695906f, -1.848897394f);
    CHECK(t.alloc.stats().current[static_cast<int>(MemTag::OptimizerStates)] == 16);
  }
  // AdamW, weight decay 0.1: p shrinks by (1 − 0.1·0.1) before each update:
  // p₁ = 0.99·p − 0.1·sign(g₁) = [0.89, −1.88]; p₂ = 0.99·p₁ − (the same
  // Adam step) = [0.800795906, −1.810097394].
  {
    TwoSteps t;
    Adam adamw(t.alloc, {.lr = 0.1f, .weight_decay = 0.1f, .decoupled = true});
    t.run(adamw, 0.89f, -1.88f, 0.800795906f, -1.810097394f);
  }
  // Adam with L2 decay 0.1: g' = g + 0.1·p enters the moments instead;
  // step 1 is still −0.1·sign(g'); step 2 gives [0.813648345, −1.833616908].
  {
    TwoSteps t;
    Adam adam_l2(t.alloc, {.lr = 0.1f, .weight_decay = 0.1f});
    t.run(adam_l2, 0.9f, -1.9f, 0.813648345f, -1.833616908f);
  }
}

// One optimizer over tensors of given shapes and values, two steps with
// given gradients, compared with hand-derived values.
struct Golden {
  TrackingAllocator alloc;
  std::vector<Tensor> p, g;
  void add(Shape shape, std::vector<float> values) {
    p.emplace_back(alloc, shape, MemTag::Params);
    g.emplace_back(alloc, shape, MemTag::Grads);
    std::copy(values.begin(), values.end(), p.back().data());
  }
  void step(Optimizer& opt, const std::vector<std::vector<float>>& grads) {
    for (std::size_t i = 0; i < g.size(); ++i) std::copy(grads[i].begin(), grads[i].end(), g[i].data());
    opt.step(p, g);
  }
  void expect(std::size_t i, const std::vector<float>& want) {
    for (std::size_t j = 0; j < want.size(); ++j)
      CHECK(p[i][static_cast<std::int64_t>(j)] == doctest::Approx(want[j]).epsilon(1e-6));
  }
};

TEST_CASE("cpu/optimizer: LARS and LAMB: two steps by hand") {
  // LARS, lr 0.1, μ 0.9, wd 0.01, η 0.5 on p = [1, −2], g₁ = [0.5, −1]:
  // ‖g‖ = ‖w‖/2, so trust = 0.5/(0.5 + 0.01), v₁ = 0.1·trust·(g + 0.01·p) =
  // [0.05, −0.1], p₁ = [0.95, −1.9]; with g₂ = [0.1, 0.2], p₂ = [0.8575,
  // −1.888515982] (v₂ = 0.9·v₁ + lr·trust₂·(g₂ + 0.01·p₁)).
  {
    Golden t;
    t.add(Shape{2}, {1.0f, -2.0f});
    Lars lars(t.alloc, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .trust_coefficient = 0.5f});
    t.step(lars, {{0.5f, -1.0f}});
    t.expect(0, {0.95f, -1.9f});
    t.step(lars, {{0.1f, 0.2f}});
    t.expect(0, {0.8575f, -1.888515982f});
  }
  // LAMB, lr 0.1, wd 0.01, eps 1e-6: step 1 has m̂/sqrt(v̂) = sign(g), so
  // u = [1.01, −1.02], ratio ‖w‖/‖u‖ = sqrt(5)/1.435453, p₁ = p − 0.1·ratio·u
  // = [0.842666991, −1.841109080]; step 2 gives [0.673089551, −1.730469147].
  {
    Golden t;
    t.add(Shape{2}, {1.0f, -2.0f});
    Lamb lamb(t.alloc, {.lr = 0.1f, .eps = 1e-6f, .weight_decay = 0.01f});
    t.step(lamb, {{0.5f, -1.0f}});
    t.expect(0, {0.842666991f, -1.841109080f});
    t.step(lamb, {{0.1f, 0.2f}});
    t.expect(0, {0.673089551f, -1.730469147f});
  }
}

TEST_CASE("cpu/optimizer: Adafactor and SM3: two steps by hand, factored for a matrix") {
  // W = [[1, −2], [0.5, 3]], G₁ = [[0.5, −1], [0.2, 0.1]], G₂ = [[0.1, 0.2],
  // [−0.3, 0.4]], lr 0.1; a vector p = [1, −2] with g₁ = [0.5, −1], g₂ = [0.1, 0.2].
  // Adafactor step 1 (β̂₂ = 0): R = row sums of G² = [1.25, 0.05], C = [0.29,
  // 1.01], V̂ = R·Cᵀ/1.3, U = G/sqrt(V̂) clipped to RMS 1; the vector's
  // U = sign(g), so p₁ = [0.9, −1.9]. Values after each step from the same
  // rules (β̂₂ = 1 − 2^−0.8 at step 2).
  {
    Golden t;
    t.add(Shape{2, 2}, {1.0f, -2.0f, 0.5f, 3.0f});
    t.add(Shape{2}, {1.0f, -2.0f});
    Adafactor ada(t.alloc, {.lr = 0.1f});
    t.step(ada, {{0.5f, -1.0f, 0.2f, 0.1f}, {0.5f, -1.0f}});
    t.expect(0, {0.921162289f, -1.915510583f, 0.342324579f, 2.957755292f});
    t.expect(1, {0.9f, -1.9f});
    t.step(ada, {{0.1f, 0.2f, -0.3f, 0.4f}, {0.1f, 0.2f}});
    t.expect(0, {0.894415014f, -1.946334495f, 0.490312694f, 2.844059658f});
    t.expect(1, {0.870140099f, -1.929859901f});
    // Factored: 2 + 2 floats for the matrix, 2 for the vector.
    CHECK(t.alloc.stats().current[static_cast<int>(MemTag::OptimizerStates)] == 24);
  }
  // SM3 step 1: covers start at 0, so ν = g² and the step is lr·sign(g):
  // W₁ = [[0.9, −1.9], [0.4, 2.9]]; step 2 takes ν = min(r_i, c_j) + g²,
  // W₂ = [[0.880388386, −1.919611614], [0.483205029, 2.810557281]]. The
  // vector is Adagrad: p₂ = p₁ − 0.1·g₂/sqrt(g₁² + g₂²).
  {
    Golden t;
    t.add(Shape{2, 2}, {1.0f, -2.0f, 0.5f, 3.0f});
    t.add(Shape{2}, {1.0f, -2.0f});
    Sm3 sm3(t.alloc, {.lr = 0.1f});
    t.step(sm3, {{0.5f, -1.0f, 0.2f, 0.1f}, {0.5f, -1.0f}});
    t.expect(0, {0.9f, -1.9f, 0.4f, 2.9f});
    t.expect(1, {0.9f, -1.9f});
    t.step(sm3, {{0.1f, 0.2f, -0.3f, 0.4f}, {0.1f, 0.2f}});
    t.expect(0, {0.880388386f, -1.919611614f, 0.483205029f, 2.810557281f});
    t.expect(1, {0.9f - 0.1f * 0.1f / std::sqrt(0.26f), -1.9f - 0.1f * 0.2f / std::sqrt(1.04f)});
  }
}

TEST_CASE("cpu/optimizer: 8-bit Adam: dynamic maps, two steps by hand, state bytes") {
  // Step 1 runs Adam in fp32 from zero moments: p₁ = [0.9, −1.9]. Then m =
  // [0.05, −0.1] is stored as m/0.1 → the nearest signed map values
  // [0.50078125, −0.99296875], v = [0.00025, 0.001] as v/0.001 → unsigned
  // [0.251171875, 1]. Step 2 (g = [0.1, 0.2]) dequantizes and runs Adam:
  // p₂ = [0.819773833, −1.849359371] (fp32 Adam gives [0.819695906,
  // −1.848897394]).
  Golden t;
  t.add(Shape{2}, {1.0f, -2.0f});
  Adam8bit adam(t.alloc, {.lr = 0.1f});
  const auto& sm = adam.signed_map();
  const auto& um = adam.unsigned_map();
  CHECK(std::is_sorted(sm.begin(), sm.end()));
  CHECK(sm.front() == -0.99296875f);
  CHECK(sm.back() == 1.0f);
  CHECK(std::count(sm.begin(), sm.end(), 0.0f) == 1);
  CHECK(um.front() == 0.0f);
  CHECK(um[1] == doctest::Approx(1e-6 * (0.1 + 0.9 * 0.25)));  // smallest non-zero: 10⁻⁶·0.325
  t.step(adam, {{0.5f, -1.0f}});
  t.expect(0, {0.9f, -1.9f});
  t.step(adam, {{0.1f, 0.2f}});
  t.expect(0, {0.819773833f, -1.849359371f});
  // 2 codes per element, 2 absmax per block: a 4096-element tensor in blocks
  // of 2048 holds (2 + 8/2048)·4096 bytes, bytes_per_param's figure.
  TrackingAllocator alloc;
  std::vector<Tensor> p, g;
  p.emplace_back(alloc, Shape{64, 64}, MemTag::Params);
  g.emplace_back(alloc, Shape{64, 64}, MemTag::Grads);
  Adam8bit big(alloc, {});
  big.step(p, g);
  CHECK(static_cast<double>(alloc.stats().current[static_cast<int>(MemTag::OptimizerStates)]) ==
        strategies::bytes_per_param(strategies::Optimizer::Adam8bit, cost::Precision::FP32).optimizer *
            4096);
  CHECK(alloc.stats().current[static_cast<int>(MemTag::Workspace)] == 0);
}

TEST_CASE("cpu/optimizer: optimizer state bytes equal the memory model's for a GPT") {
  // fp32 training: element-wise optimizers keep bytes_per_param(opt).optimizer
  // per parameter (SGD 0, momentum and LARS 4, Adam, AdamW and LAMB 8);
  // Adafactor and SM3 keep factored_state_bytes summed over the op chain.
  // Their scratch is gone after the step.
  cost::ModelSpec m = testing::tiny_gpt();
  const auto chain = cost::expand(m, {.precision = cost::Precision::FP32});
  double factored = 0.0;
  for (const auto* layer : {&chain.embedding, &chain.main_block(), &chain.head})
    for (const auto& op : layer->ops)
      factored += strategies::factored_state_bytes(op) * (layer == &chain.main_block() ? m.layers : 1);
  using O = strategies::Optimizer;
  auto run = [&](O kind, auto make) {
    TrackingAllocator alloc;
    GptModel model(m, alloc, 1);
    auto opt = make(alloc);
    opt.step(model.params(), model.grads());
    const auto st = alloc.stats();
    const double want = strategies::is_factored(kind)
                            ? factored
                            : strategies::bytes_per_param(kind, cost::Precision::FP32).optimizer *
                                  static_cast<double>(chain.params());
    CHECK_MESSAGE(static_cast<double>(st.current[static_cast<int>(MemTag::OptimizerStates)]) == want,
                  enum_name(kind));
    CHECK(st.current[static_cast<int>(MemTag::Workspace)] == 0);
  };
  run(O::Sgd, [](Allocator& a) { return Sgd(a, {}); });
  run(O::Momentum, [](Allocator& a) { return Sgd(a, {.momentum = 0.9f}); });
  run(O::Adam, [](Allocator& a) { return Adam(a, {}); });
  run(O::AdamW, [](Allocator& a) { return Adam(a, {.weight_decay = 0.1f, .decoupled = true}); });
  run(O::Lars, [](Allocator& a) { return Lars(a, {}); });
  run(O::Lamb, [](Allocator& a) { return Lamb(a, {}); });
  run(O::Adafactor, [](Allocator& a) { return Adafactor(a, {}); });
  run(O::Sm3, [](Allocator& a) { return Sm3(a, {}); });
}

// Double-precision references written from the published rules, one tensor
// at a time: w, g and the state vectors are the tensor's values.
struct Ref {
  std::vector<double> w, a, b;  // parameter, first and second state
  std::vector<double> r, c;     // factored row and column state
  std::int64_t rows = 0, cols = 0, t = 0;
};

double l2(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

TEST_CASE("cpu/optimizer: eight optimizers follow their published rules on random tensors") {
  // Five steps on a 5×7 matrix and a 7-vector with seeded random weights
  // and gradients; every entry within 1e-5 (relative) of a double-precision
  // reference coded separately from the papers' update rules.
  constexpr std::int64_t R = 5, C = 7;
  using Rule = std::function<void(Ref&, const std::vector<double>&)>;
  auto run = [&](const char* name, Optimizer& opt, TrackingAllocator& alloc, const Rule& rule) {
    Rng rng(31);
    std::vector<Tensor> p, g;
    p.emplace_back(alloc, Shape{R, C}, MemTag::Params);
    p.emplace_back(alloc, Shape{C}, MemTag::Params);
    for (auto& t : p) g.emplace_back(alloc, t.shape(), MemTag::Grads);
    std::vector<Ref> ref(2);
    for (std::size_t i = 0; i < 2; ++i) {
      for (float& v : p[i].span()) v = static_cast<float>(rng.normal());
      ref[i].w.assign(p[i].span().begin(), p[i].span().end());
      const auto n = ref[i].w.size();
      ref[i].a.assign(n, 0.0);
      ref[i].b.assign(n, 0.0);
      ref[i].rows = i == 0 ? R : 0;
      ref[i].cols = i == 0 ? C : 0;
      ref[i].r.assign(static_cast<std::size_t>(R), 0.0);
      ref[i].c.assign(static_cast<std::size_t>(C), 0.0);
    }
    for (int step = 0; step < 5; ++step) {
      for (std::size_t i = 0; i < 2; ++i) {
        std::vector<double> gd;
        for (float& v : g[i].span()) {
          v = static_cast<float>(rng.normal());
          gd.push_back(v);
        }
        ++ref[i].t;
        rule(ref[i], gd);
      }
      opt.step(p, g);
    }
    double worst = 0.0;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < ref[i].w.size(); ++j)
        worst = std::max(worst, std::abs(p[i][static_cast<std::int64_t>(j)] - ref[i].w[j]) /
                                    std::max(1.0, std::abs(ref[i].w[j])));
    CHECK_MESSAGE(worst < 1e-5, name << ": worst relative error " << worst);
  };
  const double lr = 0.05, wd = 0.02;
  {  // SGD with L2 decay: w −= lr·(g + wd·w).
    TrackingAllocator a;
    Sgd opt(a, {.lr = 0.05f, .weight_decay = 0.02f});
    run("sgd", opt, a, [&](Ref& r, const std::vector<double>& g) {
      for (std::size_t j = 0; j < g.size(); ++j) r.w[j] -= lr * (g[j] + wd * r.w[j]);
    });
  }
  {  // SGD with momentum μ = 0.9 and L2 decay: v = μv + g + wd·w; w −= lr·v.
    TrackingAllocator a;
    Sgd opt(a, {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.02f});
    run("momentum", opt, a, [&](Ref& r, const std::vector<double>& g) {
      for (std::size_t j = 0; j < g.size(); ++j) {
        r.a[j] = 0.9 * r.a[j] + g[j] + wd * r.w[j];
        r.w[j] -= lr * r.a[j];
      }
    });
  }
  for (bool decoupled : {false, true}) {  // Adam (L2) and AdamW (Loshchilov & Hutter)
    TrackingAllocator a;
    Adam opt(a, {.lr = 0.05f, .weight_decay = 0.02f, .decoupled = decoupled});
    run(decoupled ? "adamw" : "adam", opt, a, [&](Ref& r, const std::vector<double>& g0) {
      for (std::size_t j = 0; j < g0.size(); ++j) {
        double g = g0[j];
        if (decoupled) r.w[j] *= 1 - lr * wd; else g += wd * r.w[j];
        r.a[j] = 0.9 * r.a[j] + 0.1 * g;
        r.b[j] = 0.999 * r.b[j] + 0.001 * g * g;
        const double mh = r.a[j] / (1 - std::pow(0.9, r.t)), vh = r.b[j] / (1 - std::pow(0.999, r.t));
        r.w[j] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
    });
  }
  {  // LARS: trust η‖w‖/(‖g‖ + wd‖w‖); v = μv + lr·trust·(g + wd·w); w −= v.
    TrackingAllocator a;
    Lars opt(a, {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.02f, .trust_coefficient = 0.01f});
    run("lars", opt, a, [&](Ref& r, const std::vector<double>& g) {
      const double trust = 0.01 * l2(r.w) / (l2(g) + wd * l2(r.w));
      for (std::size_t j = 0; j < g.size(); ++j) {
        r.a[j] = 0.9 * r.a[j] + lr * trust * (g[j] + wd * r.w[j]);
        r.w[j] -= r.a[j];
      }
    });
  }
  {  // LAMB: u = m̂/(sqrt(v̂) + ε) + wd·w; w −= lr·‖w‖/‖u‖·u.
    TrackingAllocator a;
    Lamb opt(a, {.lr = 0.05f, .eps = 1e-6f, .weight_decay = 0.02f});
    run("lamb", opt, a, [&](Ref& r, const std::vector<double>& g) {
      std::vector<double> u(g.size());
      for (std::size_t j = 0; j < g.size(); ++j) {
        r.a[j] = 0.9 * r.a[j] + 0.1 * g[j];
        r.b[j] = 0.999 * r.b[j] + 0.001 * g[j] * g[j];
        const double mh = r.a[j] / (1 - std::pow(0.9, r.t)), vh = r.b[j] / (1 - std::pow(0.999, r.t));
        u[j] = mh / (std::sqrt(vh) + 1e-6) + wd * r.w[j];
      }
      const double ratio = l2(r.w) / l2(u);
      for (std::size_t j = 0; j < g.size(); ++j) r.w[j] -= lr * ratio * u[j];
    });
  }
  {  // Adafactor: factored V̂ = R·Cᵀ/ΣR for the matrix, full V for the vector.
    TrackingAllocator a;
    Adafactor opt(a, {.lr = 0.05f});
    run("adafactor", opt, a, [&](Ref& r, const std::vector<double>& g) {
      const double b2 = 1 - std::pow(static_cast<double>(r.t), -0.8);
      std::vector<double> u(g.size());
      if (r.rows == 0) {
        for (std::size_t j = 0; j < g.size(); ++j) {
          r.b[j] = b2 * r.b[j] + (1 - b2) * (g[j] * g[j] + 1e-30);
          u[j] = g[j] / std::sqrt(r.b[j]);
        }
      } else {
        double total = 0;
        for (std::int64_t i = 0; i < r.rows; ++i) {
          double s = 0;
          for (std::int64_t j = 0; j < r.cols; ++j) s += g[i * r.cols + j] * g[i * r.cols + j] + 1e-30;
          r.r[i] = b2 * r.r[i] + (1 - b2) * s;
          total += r.r[i];
        }
        for (std::int64_t j = 0; j < r.cols; ++j) {
          double s = 0;
          for (std::int64_t i = 0; i < r.rows; ++i) s += g[i * r.cols + j] * g[i * r.cols + j] + 1e-30;
          r.c[j] = b2 * r.c[j] + (1 - b2) * s;
        }
        for (std::int64_t i = 0; i < r.rows; ++i)
          for (std::int64_t j = 0; j < r.cols; ++j)
            u[i * r.cols + j] = g[i * r.cols + j] / std::sqrt(r.r[i] * r.c[j] / total);
      }
      const double rms = l2(u) / std::sqrt(static_cast<double>(u.size()));
      for (std::size_t j = 0; j < g.size(); ++j) r.w[j] -= lr * u[j] / std::max(1.0, rms);
    });
  }
  {  // SM3-II: ν = min(row, col cover) + g²; covers take the max of ν.
    TrackingAllocator a;
    Sm3 opt(a, {.lr = 0.05f});
    run("sm3", opt, a, [&](Ref& r, const std::vector<double>& g) {
      if (r.rows == 0) {
        for (std::size_t j = 0; j < g.size(); ++j) {
          r.b[j] += g[j] * g[j];
          r.w[j] -= lr * g[j] / std::sqrt(r.b[j]);
        }
        return;
      }
      std::vector<double> nr(static_cast<std::size_t>(r.rows), 0), nc(static_cast<std::size_t>(r.cols), 0);
      for (std::int64_t i = 0; i < r.rows; ++i)
        for (std::int64_t j = 0; j < r.cols; ++j) {
          const auto k = static_cast<std::size_t>(i * r.cols + j);
          const double nu = std::min(r.r[i], r.c[j]) + g[k] * g[k];
          nr[i] = std::max(nr[i], nu);
          nc[j] = std::max(nc[j], nu);
          r.w[k] -= lr * g[k] / std::sqrt(nu);
        }
      r.r = nr;
      r.c = nc;
    });
  }
}

TEST_CASE("cpu/optimizer: optimizers reject gradients that do not match the parameters") {
  // A shape mismatch or a changed parameter list is an error, not a silent update.
  TrackingAllocator alloc;
  std::vector<Tensor> p, g;
  p.emplace_back(alloc, Shape{2}, MemTag::Params);
  g.emplace_back(alloc, Shape{3}, MemTag::Grads);
  Adam adam(alloc, {});
  CHECK_THROWS_AS(adam.step(p, g), Error);
  g.clear();
  CHECK_THROWS_AS(adam.step(p, g), Error);
}

}  // namespace
}  // namespace strata::backend::cpu
