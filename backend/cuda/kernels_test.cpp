// The CUDA kernels, ops and model against the CPU backend's: the same random
// inputs through both, the results equal within fp32 rounding of different
// summation orders. Each case states its bound. Runs only with a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/gpt.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/test_util.hpp"
#include "backend/cuda/blas.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gpt.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/ops.hpp"
#include "backend/cuda/optimizer.hpp"
#include "costmodel/model.hpp"

namespace strata::backend::cuda {
namespace {

using backend::Rng;
using cpu::test::random_vec;
using Vec = std::vector<float>;

// max |got − want| <= tol · max(1, max |want|): a bound relative to the
// tensor's scale, which is what fp32 reordering perturbs.
void check_close(const std::string& what, const Vec& got, const Vec& want, double tol) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  double worst = 0, scale = 1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= tol * scale, what << ": largest difference " << worst << " at " << at << " (got "
                                          << got[at] << ", want " << want[at] << "; bound " << tol * scale << ")");
}

struct Fixture {
  DeviceAllocator alloc{0};
  Blas blas{alloc};
  Ctx ctx{nullptr, &blas};
  Rng rng{42};

  DeviceTensor up(const Vec& v) {
    DeviceTensor t(alloc, {static_cast<std::int64_t>(v.size())}, MemTag::Other, Fill::Uninitialised);
    t.upload(v);
    return t;
  }
  DeviceIndexTensor up(const std::vector<std::int32_t>& v) {
    DeviceIndexTensor t(alloc, {static_cast<std::int64_t>(v.size())}, MemTag::Other, Fill::Uninitialised);
    t.upload(v);
    return t;
  }
  Vec rand(std::size_t n, double sd = 1.0) { return random_vec(n, rng, sd); }
  std::vector<std::int32_t> ids(std::size_t n, std::int64_t vocab) {
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = static_cast<std::int32_t>(rng.below(vocab));
    return v;
  }
};

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: embedding forward and backward equal the CPU's") {
  // Lookup is exact; the scatter-add of repeated tokens differs only in order (1e-6).
  const std::int64_t B = 3, S = 16, h = 40, V = 7;
  const auto tok = ids(B * S, V);
  const Vec table = rand(V * h), pos = rand(S * h), dy = rand(B * S * h);
  Vec y(B * S * h), dtable(V * h, 0.5f), dpos(S * h, -0.25f);
  cpu::embedding_forward(tok.data(), table.data(), pos.data(), y.data(), B, S, h, V);
  cpu::embedding_backward(tok.data(), dy.data(), dtable.data(), dpos.data(), B, S, h);
  auto dtok = up(tok);
  auto dT = up(table), dP = up(pos), dY = up(Vec(y.size())), dDy = up(dy);
  auto dDT = up(Vec(V * h, 0.5f)), dDP = up(Vec(S * h, -0.25f));
  kernels::embedding_forward(nullptr, dtok.data(), dT.data(), dP.data(), dY.data(), B, S, h);
  kernels::embedding_backward(nullptr, dtok.data(), dDy.data(), dDT.data(), dDP.data(), B, S, h);
  check_close("y", dY.download(), y, 0);
  check_close("dtable", dDT.download(), dtable, 1e-6);
  check_close("dpos", dDP.download(), dpos, 1e-6);
}

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: layer norm and RMS norm forward and backward equal the CPU's") {
  // Row statistics in fp32 on the GPU, double on the CPU: 1e-5 of the scale.
  for (const std::int64_t dim : {8, 100, 1024, 3000}) {
    CAPTURE(dim);
    const std::int64_t rows = 37;
    const Vec x = rand(rows * dim, 2.0), g = rand(dim), b = rand(dim), dy = rand(rows * dim);
    const Vec dx0 = rand(rows * dim), dg0 = rand(dim), db0 = rand(dim);
    Vec y(x.size()), dx = dx0, dg = dg0, db = db0;
    cpu::layernorm_forward(x.data(), g.data(), b.data(), y.data(), rows, dim, 1e-5f);
    cpu::layernorm_backward(x.data(), g.data(), dy.data(), dx.data(), dg.data(), db.data(), rows, dim, 1e-5f);
    auto dX = up(x), dG = up(g), dB = up(b), dY = up(Vec(x.size())), dDy = up(dy), dDx = up(dx0), dDg = up(dg0),
         dDb = up(db0), stats = up(Vec(2 * rows));
    kernels::layernorm_forward(nullptr, dX.data(), dG.data(), dB.data(), dY.data(), rows, dim, 1e-5f);
    kernels::layernorm_backward(nullptr, dX.data(), dG.data(), dDy.data(), dDx.data(), dDg.data(), dDb.data(), rows,
                                dim, 1e-5f, stats.data());
    check_close("layernorm y", dY.download(), y, 1e-5);
    check_close("layernorm dx (accumulated)", dDx.download(), dx, 1e-5);
    check_close("layernorm dgamma", dDg.download(), dg, 1e-5);
    check_close("layernorm dbeta", dDb.download(), db, 1e-5);

    Vec ry(x.size()), rdx = dx0, rdg = dg0;
    cpu::rmsnorm_forward(x.data(), g.data(), ry.data(), rows, dim, 1e-5f);
    cpu::rmsnorm_backward(x.data(), g.data(), dy.data(), rdx.data(), rdg.data(), rows, dim, 1e-5f);
    auto rDx = up(dx0), rDg = up(dg0);
    kernels::rmsnorm_forward(nullptr, dX.data(), dG.data(), dY.data(), rows, dim, 1e-5f);
    kernels::rmsnorm_backward(nullptr, dX.data(), dG.data(), dDy.data(), rDx.data(), rDg.data(), rows, dim, 1e-5f,
                              stats.data());
    check_close("rmsnorm y", dY.download(), ry, 1e-5);
    check_close("rmsnorm dx", rDx.download(), rdx, 1e-5);
    check_close("rmsnorm dgamma", rDg.download(), rdg, 1e-5);
  }
}

TEST_CASE_FIXTURE(Fixture, "cuda/ops: linear forward and backward equal the CPU's in both weight layouts") {
  // cuBLAS fp32 (no TF32) against OpenBLAS sgemm, k <= 300: 1e-5 of the scale.
  const std::int64_t n = 50, in = 300, out = 70;
  for (const auto layout : {backend::WeightLayout::InOut, backend::WeightLayout::OutIn})
    for (const bool accumulate : {false, true}) {
      CAPTURE(static_cast<int>(layout));
      CAPTURE(accumulate);
      const Vec x = rand(n * in), w = rand(in * out, 0.1), b = rand(out), y0 = rand(n * out), dy = rand(n * out);
      const Vec dx0 = rand(n * in), dw0 = rand(in * out), db0 = rand(out);
      Vec y = y0, dx = dx0, dw = dw0, db = db0;
      cpu::linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, out, layout, accumulate);
      cpu::linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, in, out, layout,
                           accumulate);
      auto dX = up(x), dW = up(w), dB = up(b), dY = up(y0), dDy = up(dy), dDx = up(dx0), dDw = up(dw0), dDb = up(db0);
      linear_forward(ctx, dX.data(), dW.data(), dB.data(), dY.data(), n, in, out, layout, accumulate);
      linear_backward(ctx, dX.data(), dW.data(), dDy.data(), dDx.data(), dDw.data(), dDb.data(), n, in, out, layout,
                      accumulate);
      check_close("y", dY.download(), y, 1e-5);
      check_close("dx", dDx.download(), dx, 1e-5);
      check_close("dw (accumulated)", dDw.download(), dw, 1e-5);
      check_close("db (accumulated)", dDb.download(), db, 1e-5);
    }
}

TEST_CASE_FIXTURE(Fixture, "cuda/ops: causal attention forward and backward equal the CPU's, in head groups of any size") {
  // Softmax with expf against exp_approx (2e-7) and reordered sums: 1e-5 of the scale.
  const backend::AttentionDims d{2, 33, 4, 8};
  const std::int64_t N = d.batch * d.seq, H = d.hidden(), SS = d.seq * d.seq;
  const Vec qkv = rand(N * 3 * H), dout = rand(N * H);
  Vec probs(d.batch * d.heads * SS), out(N * H), dqkv(N * 3 * H), scratch(SS);
  cpu::attention_forward(qkv.data(), probs.data(), out.data(), d);
  cpu::attention_backward(qkv.data(), probs.data(), dout.data(), dqkv.data(), scratch.data(), d);
  auto dQ = up(qkv), dO = up(dout), dPr = up(Vec(probs.size())), dOut = up(Vec(out.size()));
  attention_forward(ctx, dQ.data(), dPr.data(), dOut.data(), d);
  check_close("probs", dPr.download(), probs, 1e-5);
  check_close("out", dOut.download(), out, 1e-5);
  for (const std::int64_t g : {1, 3, 4}) {
    CAPTURE(g);
    auto dD = up(Vec(dqkv.size(), 7.0f)), sc = up(Vec(g * SS));
    attention_backward(ctx, dQ.data(), dPr.data(), dO.data(), dD.data(), sc.data(), g, d);
    check_close("dqkv", dD.download(), dqkv, 1e-5);
  }
  // Only P (selective recompute refills the attention core).
  auto dPr2 = up(Vec(probs.size()));
  attention_forward(ctx, dQ.data(), dPr2.data(), nullptr, d);
  check_close("probs without out", dPr2.download(), probs, 1e-5);
}

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: GeLU and SwiGLU forward and backward equal the CPU's") {
  // tanhf / expf against the CPU's polynomial exp: 1e-6 of the scale.
  const std::int64_t rows = 9, f = 77;
  const Vec x = rand(rows * f, 3.0), dy = rand(rows * f), gu = rand(rows * 2 * f, 3.0);
  Vec y(x.size()), dx(x.size()), sy(rows * f), dgu(gu.size());
  cpu::gelu_forward(x.data(), y.data(), rows * f);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), rows * f);
  cpu::swiglu_forward(gu.data(), sy.data(), rows, f);
  cpu::swiglu_backward(gu.data(), dy.data(), dgu.data(), rows, f);
  auto dX = up(x), dY = up(Vec(x.size())), dDy = up(dy), dGu = up(gu), dSy = up(Vec(sy.size())),
       dDgu = up(Vec(gu.size()));
  kernels::gelu_forward(nullptr, dX.data(), dY.data(), rows * f);
  check_close("gelu y", dY.download(), y, 1e-6);
  kernels::gelu_backward(nullptr, dX.data(), dDy.data(), dDy.data(), rows * f);  // in place, as the model runs it
  check_close("gelu dx", dDy.download(), dx, 1e-6);
  auto dDy2 = up(dy);
  kernels::swiglu_forward(nullptr, dGu.data(), dSy.data(), rows, f);
  kernels::swiglu_backward(nullptr, dGu.data(), dDy2.data(), dDgu.data(), rows, f);
  check_close("swiglu y", dSy.download(), sy, 1e-6);
  check_close("swiglu dgu", dDgu.download(), dgu, 1e-6);
}

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: cross-entropy loss and gradient equal the CPU's") {
  // A vocabulary over several block widths; uniform logits give log V exactly enough (1e-6).
  const std::int64_t n = 13, V = 1000;
  const Vec logits = rand(n * V, 4.0);
  const auto tgt = ids(n, V);
  Vec p = logits;
  const double loss = cpu::cross_entropy_forward(p.data(), tgt.data(), n, V);
  cpu::cross_entropy_backward(p.data(), tgt.data(), n, V, 0.5f / static_cast<float>(n));
  auto dL = up(logits);
  auto dT = up(tgt);
  BasicDeviceTensor<double> rows(alloc, {n}, MemTag::Other), acc(alloc, {1}, MemTag::Other);
  kernels::cross_entropy_forward(nullptr, dL.data(), dT.data(), n, V, rows.data());
  kernels::sum_into(nullptr, rows.data(), n, 1.0 / static_cast<double>(n), acc.data());
  kernels::cross_entropy_backward(nullptr, dL.data(), dT.data(), n, V, 0.5f / static_cast<float>(n));
  CHECK(acc.download()[0] == doctest::Approx(loss / static_cast<double>(n)).epsilon(1e-6));
  check_close("gradient", dL.download(), p, 1e-6);
  auto flat = up(Vec(V, 0.0f));
  BasicDeviceTensor<double> one(alloc, {1}, MemTag::Other), acc2(alloc, {1}, MemTag::Other);
  auto t0 = up(std::vector<std::int32_t>{3});
  kernels::cross_entropy_forward(nullptr, flat.data(), t0.data(), 1, V, one.data());
  kernels::sum_into(nullptr, one.data(), 1, 1.0, acc2.data());
  CHECK(acc2.download()[0] == doctest::Approx(std::log(1000.0)).epsilon(1e-6));
}

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: Adam, AdamW and SGD with momentum step as the CPU optimizers do") {
  // Three steps on the same parameters and gradients: 1e-6 of the scale
  // (sqrtf and division ordering only).
  const Vec p0 = rand(1000), g0 = rand(1000, 0.1);
  cpu::TrackingAllocator host;
  for (const int kind : {0, 1, 2}) {
    CAPTURE(kind);
    std::vector<cpu::Tensor> P, G;
    P.emplace_back(host, Shape{1000}, MemTag::Params);
    G.emplace_back(host, Shape{1000}, MemTag::Grads);
    std::memcpy(P[0].data(), p0.data(), 4000);
    std::memcpy(G[0].data(), g0.data(), 4000);
    std::unique_ptr<cpu::Optimizer> ref;
    strategies::Optimizer which = strategies::Optimizer::Adam;
    if (kind == 0) ref = std::make_unique<cpu::Adam>(host, backend::AdamOptions{.lr = 0.01f, .weight_decay = 0.1f});
    if (kind == 1) {
      ref = std::make_unique<cpu::Adam>(host, backend::AdamOptions{.lr = 0.01f, .weight_decay = 0.1f, .decoupled = true});
      which = strategies::Optimizer::AdamW;
    }
    if (kind == 2) {
      ref = std::make_unique<cpu::Sgd>(host, backend::SgdOptions{.lr = 0.01f, .momentum = 0.9f, .weight_decay = 0.1f});
      which = strategies::Optimizer::Momentum;
    }
    auto opt = make_optimizer(which, 0.01f, 0.1f, alloc);
    std::vector<DeviceTensor> dp, dg;
    dp.push_back(up(p0));
    dg.push_back(up(g0));
    for (int s = 0; s < 3; ++s) {
      ref->step(P, G);
      opt->step(nullptr, dp, dg, nullptr);
    }
    check_close("parameters", dp[0].download(), Vec(P[0].data(), P[0].data() + 1000), 1e-6);
  }
}

TEST_CASE_FIXTURE(Fixture, "cuda/kernels: a non-finite gradient flags its tensor and the update skips itself") {
  auto p = up(Vec{1, 2, 3}), g = up(Vec{0.5f, NAN, 1});
  BasicDeviceTensor<int> flags(alloc, {2}, MemTag::Other);
  kernels::flag_non_finite(nullptr, g.data(), 3, flags.data(), flags.data() + 1);
  const auto f = flags.download();
  CHECK(f[0] == 1);
  CHECK(f[1] == 1);
  kernels::sgd_step(nullptr, p.data(), g.data(), nullptr, 3, 0.1f, 0, 0, true, flags.data() + 1);
  CHECK(p.download() == Vec{1, 2, 3});
}

TEST_CASE_FIXTURE(Fixture, "cuda/blas: bf16, fp16 and tf32 products are close to fp32") {
  // 16-bit inputs carry 8 (bf16) or 11 (fp16) bits: relative 1e-2 and 2e-3
  // of the scale for k = 256 sums of products of values in [-1, 1); TF32 10 bits.
  const std::int64_t m = 64, n = 48, k = 256;
  for (const bool bf16 : {true, false}) {
    CAPTURE(bf16);
    BasicDeviceTensor<std::uint16_t> A(alloc, {m * k}, MemTag::Other), B(alloc, {k * n}, MemTag::Other),
        C(alloc, {m * n}, MemTag::Other);
    kernels::init_uniform_16bit(nullptr, A.data(), m * k, bf16, 1);
    kernels::init_uniform_16bit(nullptr, B.data(), k * n, bf16, 2);
    blas.gemm_typed(nullptr, bf16 ? GemmType::BF16 : GemmType::FP16, false, false, m, n, k, 1.0f, A.data(), k,
                    B.data(), n, 0.0f, C.data(), n);
    auto to_float = [&](std::uint16_t v) {
      if (bf16) {
        const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
      }
      // IEEE half to float (normal and subnormal; no Inf/NaN here).
      const int e = (v >> 10) & 0x1f, mant = v & 0x3ff;
      const float mag = e == 0 ? std::ldexp(static_cast<float>(mant), -24) : std::ldexp(1.0f + mant / 1024.0f, e - 15);
      return (v & 0x8000) ? -mag : mag;
    };
    const auto ha = A.download(), hb = B.download(), hc = C.download();
    Vec want(m * n, 0.0f), got(m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l) s += static_cast<double>(to_float(ha[i * k + l])) * to_float(hb[l * n + j]);
        want[i * n + j] = static_cast<float>(s);
        got[i * n + j] = to_float(hc[i * n + j]);
      }
    check_close("product", got, want, bf16 ? 1e-2 : 2e-3);
  }
  const Vec a = rand(m * k), b = rand(k * n);
  auto dA = up(a), dB = up(b), c32 = up(Vec(m * n)), ctf = up(Vec(m * n));
  blas.gemm(nullptr, false, false, m, n, k, 1.0f, dA.data(), k, dB.data(), n, 0.0f, c32.data(), n);
  blas.gemm_typed(nullptr, GemmType::TF32, false, false, m, n, k, 1.0f, dA.data(), k, dB.data(), n, 0.0f, ctf.data(), n);
  check_close("tf32", ctf.download(), c32.download(), 5e-3);
}

TEST_CASE_FIXTURE(Fixture, "cuda/memory: the device allocator counts live and peak bytes by tag; a capacity throws OutOfMemory") {
  DeviceAllocator a(0, 4096);
  {
    BasicDeviceTensor<float> x(a, {256}, MemTag::Params), y(a, {128}, MemTag::Activations);
    CHECK(a.stats().current_total == 1536);
    y.release();
    BasicDeviceTensor<float> z(a, {64}, MemTag::Activations);
    const auto s = a.stats();
    CHECK(s.peak_total == 1536);
    CHECK(s.peak[static_cast<std::size_t>(MemTag::Activations)] == 512);
    CHECK(s.current_total == 1280);
    try {
      BasicDeviceTensor<float> big(a, {1024}, MemTag::Workspace);
      FAIL("no OutOfMemory");
    } catch (const OutOfMemory& e) {
      CHECK(e.requested == 4096);
      CHECK(e.live == 1280);
      CHECK(std::string(e.what()).find("workspace") != std::string::npos);
    }
  }
  CHECK(a.stats().current_total == 0);
  CHECK(a.reserved_peak() >= 1536);
  // A real out-of-memory from the device names the request and the device's free bytes.
  const auto total = devices().at(0).memory_bytes;
  CHECK_THROWS_AS(BasicDeviceTensor<float>(alloc, {total / 4 + (1 << 20)}, MemTag::Activations), OutOfMemory);
}

TEST_CASE_FIXTURE(Fixture, "cuda/memory: the pinned pool reuses a released block of the same size and counts by tag") {
  PinnedHostPool pool;
  void* a = pool.allocate(3 << 20, MemTag::Activations);
  CHECK(pool.stats().current_total == (3 << 20));
  pool.deallocate(a, 3 << 20, MemTag::Activations);
  CHECK(pool.cached_bytes() == (3 << 20));
  void* b = pool.allocate((3 << 20) - 100, MemTag::Activations);
  CHECK(b == a);
  CHECK(pool.cached_bytes() == 0);
  CHECK(pool.stats().peak_total == (3 << 20));
  pool.deallocate(b, (3 << 20) - 100, MemTag::Activations);
  CHECK(pool.stats().current_total == 0);
}

TEST_CASE_FIXTURE(Fixture, "cuda/check: a failing call throws naming the call, file, line and status") {
  try {
    STRATA_CUDA_CHECK(cudaSetDevice(12345));
    FAIL("no throw");
  } catch (const Error& e) {
    const std::string w = e.what();
    CHECK(w.find("cudaSetDevice(12345)") != std::string::npos);
    CHECK(w.find("kernels_test.cpp:") != std::string::npos);
    CHECK(w.find("cudaErrorInvalidDevice") != std::string::npos);
  }
  STRATA_CUDA_CHECK(cudaSetDevice(0));
}

// A small GPT of each kind: the CUDA model's loss and every gradient equal
// the CPU model's from the same parameters, with each recompute policy.
cost::ModelSpec small_gpt(bool llama) {
  cost::ModelSpec m;
  m.name = llama ? "small-llama" : "small-gpt";
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.ffn_hidden = 96;
  m.vocab = 50;
  m.seq_len = 24;
  m.tied_embeddings = !llama;
  m.bias = !llama;
  m.mlp = llama ? cost::MlpKind::Swiglu : cost::MlpKind::Gelu;
  m.norm = llama ? cost::NormKind::RmsNorm : cost::NormKind::LayerNorm;
  m.position_embedding = llama ? cost::PositionEmbedding::None : cost::PositionEmbedding::Learned;
  return m;
}

TEST_CASE_FIXTURE(Fixture, "cuda/gpt: loss and gradients equal the CPU model's (GPT and Llama-style, every recompute policy)") {
  // Loss to 1e-5 relative; each gradient to 1e-4 of its tensor's scale.
  for (const bool llama : {false, true})
    for (const auto policy : {cost::Recompute::None, cost::Recompute::Selective, cost::Recompute::Full}) {
      CAPTURE(llama);
      CAPTURE(static_cast<int>(policy));
      const auto spec = small_gpt(llama);
      cpu::TrackingAllocator host;
      cpu::GptModel ref(spec, host, 7);
      GptModel gpu(spec, alloc, ctx, 3);
      REQUIRE(gpu.names() == ref.names());
      REQUIRE(gpu.parameter_count() == ref.parameter_count());
      for (std::size_t i = 0; i < ref.params().size(); ++i) gpu.set_parameter(static_cast<int>(i), ref.params()[i].span());
      const std::int64_t batch = 3;
      const auto tok = ids(batch * spec.seq_len, spec.vocab), tgt = ids(batch * spec.seq_len, spec.vocab);
      const backend::StepOptions o{.loss_scale = 0.5f, .recompute = policy};
      const double want = ref.forward_backward(tok, tgt, batch, o);
      gpu.zero_grads();
      const double got = gpu.forward_backward(tok, tgt, batch, o);
      CHECK(got == doctest::Approx(want).epsilon(1e-5));
      for (std::size_t i = 0; i < ref.grads().size(); ++i) {
        const auto& g = ref.grads()[i];
        check_close(ref.names()[i], gpu.grads()[i].download(), Vec(g.data(), g.data() + g.numel()), 1e-4);
      }
      CHECK(alloc.stats().current[static_cast<std::size_t>(MemTag::Activations)] == 0);
    }
}

TEST_CASE_FIXTURE(Fixture, "cuda/gpt: saved bytes per block equal the CPU model's and the op chain's at fp32") {
  const auto spec = small_gpt(false);
  GptModel gpu(spec, alloc, ctx, 3);
  const std::int64_t batch = 2;
  const auto tok = ids(batch * spec.seq_len, spec.vocab);
  auto dtok = up(tok);
  EmbeddingSaved emb;
  ActTensor x = gpu.embedding_forward(dtok.data(), batch, emb);
  BlockSaved s;
  ActTensor y = gpu.block_forward(0, std::move(x), s);
  cpu::TrackingAllocator host;
  cpu::GptModel ref(spec, host, 7);
  const auto tgt = ids(batch * spec.seq_len, spec.vocab);
  ref.forward_backward(tok, tgt, batch);
  CHECK(s.bytes() == ref.last_saved_bytes().block);
  CHECK(emb.bytes() == ref.last_saved_bytes().embedding);
}

}  // namespace
}  // namespace strata::backend::cuda
