#include "backend/cpu/optimizer.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "sim/error.hpp"

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
