// The CUDA 8-bit Adam, LARS, LAMB, Adafactor and SM3 against the CPU
// optimizers: the same odd-sized tensors and gradients through both for
// four steps, then the parameters, every state buffer and the state bytes
// compared. Runs only with a GPU; optimizer_math_test.cpp checks the same
// arithmetic on the host everywhere. The "host" suite needs no device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/memory.hpp"
#include "backend/cuda/optimizer.hpp"
#include "backend/cuda/optimizer_testing.hpp"
#include "backend/cuda/tensor.hpp"

namespace strata::backend::cuda {
namespace {

using test::Rule;
using test::RuleCase;
using Vec = std::vector<float>;
using Bytes8 = std::vector<std::uint8_t>;

std::unique_ptr<Optimizer> make_device(const RuleCase& c, DeviceAllocator& a) {
  switch (c.rule) {
    case Rule::Adam8bit: return make_adam8bit(a, c.adam8bit);
    case Rule::Lars: return make_lars(a, c.lars);
    case Rule::Lamb: return make_lamb(a, c.lamb);
    case Rule::Adafactor: return make_adafactor(a, c.adafactor);
    case Rule::Sm3: return make_sm3(a, c.sm3);
  }
  return nullptr;
}

// Largest |got − want| / max(1, |want|) over two buffers of floats.
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
Bytes8 bytes_of(const Vec& v) {
  Bytes8 b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct DeviceRun {
  DeviceAllocator& alloc;
  std::vector<DeviceTensor> p, g;
  std::unique_ptr<Optimizer> opt;
  DeviceRun(DeviceAllocator& a, const RuleCase& c, const std::vector<Shape>& shapes,
            const std::vector<Vec>& p0)
      : alloc(a) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      p.emplace_back(a, shapes[i], MemTag::Params, Fill::Uninitialised);
      g.emplace_back(a, shapes[i], MemTag::Grads, Fill::Uninitialised);
      p.back().upload(p0[i]);
    }
    opt = make_device(c, a);
  }
  void step(const std::vector<Vec>& grads, const int* skip = nullptr) {
    for (std::size_t i = 0; i < g.size(); ++i) g[i].upload(grads[i]);
    opt->step(nullptr, p, g, skip);
    STRATA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
};

TEST_CASE("cuda/optimizer: 8-bit Adam, LARS, LAMB, Adafactor and SM3 step as the CPU optimizers do") {
  // optimizer_kernels.cu is built without fused multiply-adds, so 8-bit Adam
  // (every code and absmax) and SM3 (float and max only) must give the CPU's
  // bits. LARS, LAMB and Adafactor add their norms in a tree, not the CPU's
  // loop: 1e-6 of the scale after four steps (a trust ratio's last bit).
  const auto shapes = test::odd_shapes();
  for (const auto& c : test::rule_cases()) {
    CAPTURE(c.name);
    DeviceAllocator alloc(0);
    backend::Rng rng(11);
    const auto p0 = test::random_tensors(shapes, rng, 1.0);
    test::CpuRun ref(c, shapes, p0);
    DeviceRun dev(alloc, c, shapes, p0);
    const bool exact = c.rule == Rule::Adam8bit || c.rule == Rule::Sm3;
    for (int s = 0; s < 4; ++s) {
      const auto g = test::step_grads(shapes, rng, s);
      ref.step(g);
      dev.step(g);
    }
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      CAPTURE(i);
      const Vec got = dev.p[i].download(), want = ref.param(i);
      if (exact)
        CHECK(got == want);
      else
        CHECK(rel_diff(bytes_of(got), bytes_of(want)) <= 1e-6);
      CHECK(got != p0[i]);
    }
    const auto got = dev.opt->download_states(), want = ref.alloc.states();
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      CAPTURE(k);
      REQUIRE(got[k].size() == want[k].size());
      if (exact)
        CHECK(got[k] == want[k]);
      else
        CHECK(rel_diff(got[k], want[k]) <= 1e-6);
    }
    // The same state bytes under the same tag (the scratch is Workspace).
    CHECK(alloc.stats().current[static_cast<std::size_t>(MemTag::OptimizerStates)] == ref.alloc.state_bytes());
    CHECK(dev.opt->steps() == 4);
  }
}

TEST_CASE("cuda/optimizer: a flagged step changes no parameter and no state") {
  // *skip = 1 on the device: every kernel returns before writing (one normal
  // step first, so the states are not all zero).
  const auto shapes = test::odd_shapes();
  for (const auto& c : test::rule_cases()) {
    CAPTURE(c.name);
    DeviceAllocator alloc(0);
    backend::Rng rng(5);
    const auto p0 = test::random_tensors(shapes, rng, 1.0);
    DeviceRun dev(alloc, c, shapes, p0);
    dev.step(test::step_grads(shapes, rng, 1));
    std::vector<Vec> before;
    for (auto& t : dev.p) before.push_back(t.download());
    const auto states = dev.opt->download_states();
    BasicDeviceTensor<int> flag(alloc, {1}, MemTag::Other);
    flag.upload(std::vector<int>{1});
    dev.step(test::step_grads(shapes, rng, 2), flag.data());
    for (std::size_t i = 0; i < shapes.size(); ++i) CHECK(dev.p[i].download() == before[i]);
    CHECK(dev.opt->download_states() == states);
  }
}

TEST_CASE("cuda/optimizer: make_optimizer steps the five as the CPU executor's options do") {
  // lr 1e-2, weight decay 0.1 (none for Adafactor and SM3): one step on a
  // 37 × 29 matrix equals the CPU optimizer built as backend/cpu/executor.cpp
  // builds it, to 1e-6.
  using strategies::Optimizer;
  for (const auto o : {Optimizer::Adam8bit, Optimizer::Lars, Optimizer::Lamb, Optimizer::Adafactor, Optimizer::Sm3}) {
    CAPTURE(enum_name(o));
    DeviceAllocator alloc(0);
    backend::Rng rng(3);
    const std::vector<Shape> shapes = {Shape{37, 29}};
    const auto p0 = test::random_tensors(shapes, rng, 1.0);
    const auto g = test::random_tensors(shapes, rng, 0.1);
    RuleCase c{"", Rule::Sm3};
    c.adam8bit = {.lr = 1e-2f, .weight_decay = 0.1f};
    c.lars = {.lr = 1e-2f, .weight_decay = 0.1f};
    c.lamb = {.lr = 1e-2f, .weight_decay = 0.1f};
    c.adafactor = {.lr = 1e-2f};
    c.sm3 = {.lr = 1e-2f};
    c.rule = o == Optimizer::Adam8bit ? Rule::Adam8bit
             : o == Optimizer::Lars   ? Rule::Lars
             : o == Optimizer::Lamb   ? Rule::Lamb
             : o == Optimizer::Adafactor ? Rule::Adafactor
                                         : Rule::Sm3;
    test::CpuRun ref(c, shapes, p0);
    ref.step(g);
    DeviceRun dev(alloc, c, shapes, p0);
    dev.opt = make_optimizer(o, 1e-2f, 0.1f, alloc);
    dev.step(g);
    CHECK(rel_diff(bytes_of(dev.p[0].download()), bytes_of(ref.param(0))) <= 1e-6);
  }
}

TEST_SUITE("host") {
  TEST_CASE("cuda/optimizer: every optimizer the CPU backend steps has CUDA kernels") {
    // 4-bit Adam alone is refused, with a reason (the CPU backend has none either).
    using strategies::Optimizer;
    for (const auto o : {Optimizer::Sgd, Optimizer::Momentum, Optimizer::Adam, Optimizer::AdamW, Optimizer::Adam8bit,
                         Optimizer::Adafactor, Optimizer::Sm3, Optimizer::Lamb, Optimizer::Lars}) {
      CAPTURE(enum_name(o));
      CHECK_FALSE(unsupported_optimizer(o).has_value());
    }
    const auto why = unsupported_optimizer(Optimizer::Adam4bit);
    REQUIRE(why.has_value());
    CHECK(why->find("no CUDA kernels") != std::string::npos);
  }
}

}  // namespace
}  // namespace strata::backend::cuda
