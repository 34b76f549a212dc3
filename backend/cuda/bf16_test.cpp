// The bf16 mixed-precision step on the GPU: the executor's bf16 plans against
// the CPU executor's fp32 step from the same weights (within bf16's
// precision), the bytes by memory tag against the memory model, the bf16
// kernels against the fp32 ones. The "host" suite checks the refusals, which
// need no GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/common/corpus.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/test_util.hpp"
#include "backend/cuda/test_scenario.hpp"
#include "backend/cuda/executor.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_bf16.hpp"
#include "backend/cuda/tensor.hpp"
#include "costmodel/model_io.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"

namespace strata::backend::cuda {
namespace {

using sim::MemTag;
using strategies::Plan;
using strategies::Scenario;

// The tests' tiny GPT (test_scenario.hpp) with 4 sequences in microbatches
// of 2; bf16 with fp32 gradient accumulation unless `precision` says otherwise.
Scenario tiny(int layers, cost::Precision precision = cost::Precision::BF16) {
  Scenario sc = test::tiny_gpt(layers, Plan{}, 4, 2);
  sc.plan.precision = precision;
  sc.plan.implementation.fp32_grad_accumulation = precision == cost::Precision::BF16;
  return sc;
}

using test::Ids;
using test::ids_of;

std::size_t tag(MemTag t) { return static_cast<std::size_t>(t); }

// bf16 keeps 8 significant bits (relative rounding 2^-9 per value). Through a
// few layers of bf16 activations the loss, a mean of log-probabilities near
// ln 32 ≈ 3.5, moves by far less than 1 %; gradients, rounded at every op of
// the backward, are held to 5 % of each tensor's largest entry, and the
// fp32 master weights after two steps (lr 0.05) to 1 % of their scale.
constexpr double kLossTol = 1e-2, kGradTol = 5e-2, kParamTol = 1e-2;

TEST_CASE("cuda/bf16: a bf16 step of the tiny GPT equals the fp32 CPU executor within bf16 precision") {
  for (const auto policy : {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full}) {
    CAPTURE(static_cast<int>(policy));
    Scenario sc = tiny(3);
    sc.plan.recompute = policy;
    Scenario fp32 = sc;
    fp32.plan.precision = cost::Precision::FP32;
    fp32.plan.implementation.fp32_grad_accumulation = false;
    cpu::Executor ref(fp32, {.seed = 1, .lr = 0.05f, .capture_gradients = true});
    Executor gpu(sc, {.seed = 1, .lr = 0.05f});
    gpu.set_parameters(ref.parameters());
    for (int s = 0; s < 2; ++s) {
      const Ids b = ids_of(sc, 100 + static_cast<std::uint64_t>(s));
      const auto want = ref.step(b.tokens, b.targets);
      const auto got = gpu.step(b.tokens, b.targets);
      CHECK(got.loss == doctest::Approx(want.loss).epsilon(kLossTol));
      if (s == 0) {
        std::string where;
        const double g = cpu::test::worst_relative(gpu.gradients(), ref.gradients(), &where);
        CHECK_MESSAGE(g < kGradTol, "gradient of " << where << " off by " << g);
      }
    }
    std::string where;
    const double p = cpu::test::worst_relative(gpu.parameters(), ref.parameters(), &where);
    CHECK_MESSAGE(p < kParamTol, "parameter " << where << " off by " << p);
  }
}

TEST_CASE("cuda/bf16: bytes by tag are the memory model's: bf16 weights, fp32 gradients, fp32 master + states") {
  // Memory model (lowering/memory.cpp, bytes_per_param): bf16 weights 2 B,
  // fp32-accumulated gradients 4 B, optimizer states momentum 4 B + fp32
  // master weights 4 B per parameter. The executor's pools must hold exactly
  // those under Params, Grads and OptimizerStates; activations are bf16 but
  // for the head's fp32 logits, so they peak above half the fp32 step's and
  // below all of it.
  const Scenario sc = tiny(2);
  Executor gpu(sc, {});
  const Ids b = ids_of(sc, 1);
  gpu.step(b.tokens, b.targets);
  const auto r = gpu.step(b.tokens, b.targets);
  const auto& dev = r.memory.at(0).device;
  const auto est = strategies::estimate_memory(sc);
  CHECK(dev.peak[tag(MemTag::Params)] == est.breakdown[tag(MemTag::Params)]);
  CHECK(dev.peak[tag(MemTag::Grads)] == est.breakdown[tag(MemTag::Grads)]);
  CHECK(dev.peak[tag(MemTag::OptimizerStates)] == est.breakdown[tag(MemTag::OptimizerStates)]);
  // The same in closed form: P parameters.
  std::int64_t P = 0;
  for (const auto& [name, v] : gpu.parameters()) P += static_cast<std::int64_t>(v.size());
  CHECK(dev.peak[tag(MemTag::Params)] == 2 * P);
  CHECK(dev.peak[tag(MemTag::Grads)] == 4 * P);
  CHECK(dev.peak[tag(MemTag::OptimizerStates)] == 8 * P);
  CHECK(dev.current[tag(MemTag::Activations)] == 0);

  const Scenario f32 = tiny(2, cost::Precision::FP32);
  Executor g32(f32, {});
  g32.step(b.tokens, b.targets);
  const auto r32 = g32.step(b.tokens, b.targets);
  const Bytes a16 = dev.peak[tag(MemTag::Activations)], a32 = r32.memory.at(0).device.peak[tag(MemTag::Activations)];
  CHECK(a16 < a32);
  CHECK(2 * a16 > a32);
}

TEST_CASE("cuda/bf16: Adam learns in bf16 without loss scaling") {
  // bf16 has fp32's exponent range, so small gradients do not underflow and
  // no loss scale is needed: the loss falls as in fp32.
  Scenario sc = tiny(2);
  sc.batch = {8, 4};
  sc.plan.optimizer = strategies::Optimizer::Adam;
  Executor gpu(sc, {.seed = 1, .lr = 1e-2f});
  double first = 0, last = 0;
  for (int s = 0; s < 40; ++s) {
    const Ids b = ids_of(sc, static_cast<std::uint64_t>(s));
    const double l = gpu.step(b.tokens, b.targets).loss;
    REQUIRE(std::isfinite(l));
    (s == 0 ? first : last) = l;
  }
  CHECK(first == doctest::Approx(std::log(32.0)).epsilon(0.05));
  CHECK(last < first - 0.3);
}

TEST_CASE("cuda/bf16: the cast kernels round to nearest even, as the host conversion does") {
  // Device casts of the values the host test pins (ties, overflow, NaN).
  DeviceAllocator alloc(0);
  const std::vector<float> x = {1.0f, 1.00390625f, 1.01171875f, -2.0f, 3.4e38f, 1.0f / 3.0f, NAN, 0.0f};
  DeviceTensor dx(alloc, {static_cast<std::int64_t>(x.size())}, MemTag::Other);
  dx.upload(x);
  BasicDeviceTensor<Bf16> y(alloc, dx.shape(), MemTag::Other);
  kernels::cast(alloc.stream(), dx.data(), y.data(), dx.numel());
  const auto got = y.download();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(got[i].bits == math::to_bf16(x[i]).bits);
  DeviceTensor back(alloc, dx.shape(), MemTag::Other);
  kernels::cast(alloc.stream(), y.data(), back.data(), y.numel());
  const auto f = back.download();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) CHECK(f[i] == math::to_float(got[i]));
}

TEST_SUITE("host") {
  TEST_CASE("cuda/bf16: bf16 with fp32 gradients runs; fp16, fp8 and bf16 gradients are refused, saying why") {
    auto why = [](auto edit) {
      Scenario sc = tiny(2);
      edit(sc);
      const auto w = Executor::unsupported(sc);
      return w ? *w : std::string();
    };
    CHECK(why([](Scenario&) {}).empty());
    CHECK(why([](Scenario& s) { s.plan.precision = cost::Precision::FP16; }).find("loss scaling") != std::string::npos);
    CHECK(why([](Scenario& s) { s.plan.precision = cost::Precision::FP8; }).find("fp8") != std::string::npos);
    CHECK(why([](Scenario& s) { s.plan.implementation.fp32_grad_accumulation = false; })
              .find("fp32_grad_accumulation") != std::string::npos);
  }
}

}  // namespace
}  // namespace strata::backend::cuda
