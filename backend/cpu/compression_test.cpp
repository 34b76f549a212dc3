#include "backend/cpu/compression.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/test_scenario.hpp"
#include "backend/cpu/test_util.hpp"
#include "backend/cpu/train.hpp"
#include "costmodel/model_io.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"

namespace strata::backend::cpu {
namespace {

using strategies::Collective;
using strategies::Compression;
using strategies::CompressionMethod;

// One rank of a compressed exchange: its allocator, dp handle and compressor.
struct RankCtx {
  int rank = 0;
  TrackingAllocator alloc;
  std::unique_ptr<Comm> comm;
  std::unique_ptr<Compressor> c;
};

// Runs fn(rank) on `n` rank threads, each with a compressor of `method` over
// `layout`; rethrows the first failure.
void on_ranks(int n, const Compression& method, const FlatLayout& layout,
              const std::function<void(RankCtx&)>& fn) {
  CommWorld world(n);
  std::vector<int> members(static_cast<std::size_t>(n));
  std::iota(members.begin(), members.end(), 0);
  std::vector<std::unique_ptr<RankCtx>> ranks;
  for (int r = 0; r < n; ++r) {
    auto ctx = std::make_unique<RankCtx>();
    ctx->rank = r;
    ctx->comm = std::make_unique<Comm>(world.group(members), r, ctx->alloc);
    ctx->c = make_compressor({.method = method, .ranks = n, .rank = r, .seed = 7}, layout, ctx->alloc);
    ranks.push_back(std::move(ctx));
  }
  test::run_ranks(world, [&](int r) { fn(*ranks[static_cast<std::size_t>(r)]); });
}

// encode, every round, decode.
std::vector<float> run_exchange(RankCtx& R, const std::vector<float>& g) {
  R.c->encode(g);
  for (int i = 0; i < R.c->rounds(); ++i) R.c->round(i, *R.comm);
  std::vector<float> out(g.size());
  R.c->decode(out);
  return out;
}

FlatLayout vector_layout(std::int64_t n) { return {{0, n, 1, false}}; }

Compression method(CompressionMethod m) {
  Compression c;
  c.method = m;
  return c;
}

TEST_CASE("cpu/compression: fp16 conversion rounds to nearest even and round-trips every half") {
  // Every finite half converts to float and back unchanged; known values;
  // ties go to the even neighbour; random floats land on their nearest half.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN
    REQUIRE(to_half(from_half(static_cast<std::uint16_t>(h))) == h);
  }
  CHECK(to_half(1.0f) == 0x3c00);
  CHECK(to_half(-2.0f) == 0xc000);
  CHECK(to_half(65504.0f) == 0x7bff);
  CHECK(to_half(65519.0f) == 0x7bff);
  CHECK(to_half(65520.0f) == 0x7c00);  // rounds past the largest half: infinity
  CHECK(to_half(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(to_half(std::ldexp(1.0f, -25)) == 0x0000);      // tie between 0 and 2^-24: even
  CHECK(to_half(std::ldexp(3.0f, -25)) == 0x0002);      // tie between 1 and 2 units: even
  CHECK(to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie: even
  CHECK(to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);
  CHECK(std::isnan(from_half(to_half(std::nanf("")))));
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const auto x = static_cast<float>(rng.normal() * std::pow(10.0, rng.uniform() * 8 - 6));
    const std::uint16_t h = to_half(x);
    const double err = std::fabs(static_cast<double>(from_half(h)) - x);
    for (int d : {-1, 1}) {
      const auto n = static_cast<std::uint16_t>(h + d);
      if ((n & 0x7fffu) >= 0x7c00u || ((n ^ h) & 0x8000u)) continue;
      CHECK(err <= std::fabs(static_cast<double>(from_half(n)) - x));
    }
  }
}

TEST_CASE("cpu/compression: top-k sends exactly the k largest |x| and the residual holds the rest") {
  // n = 1000, ratio 0.05: k = 50 pairs of (index, fp16 value), 6k = 300
  // bytes; the output is the fp16 value at the k largest, 0 elsewhere;
  // residual = x − output everywhere (all of x where nothing was sent).
  const std::int64_t n = 1000, k = 50;
  Rng rng(11);
  const auto x = test::random_vec(static_cast<std::size_t>(n), rng);
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  const std::set<std::int32_t> largest(order.begin(), order.begin() + k);
  Compression c = method(CompressionMethod::TopK);
  c.ratio = 0.05;
  for (bool ef : {true, false}) {
    CAPTURE(ef);
    c.error_feedback = ef;
    on_ranks(1, c, vector_layout(n), [&](RankCtx& R) {
      const auto out = run_exchange(R, x);
      int sent = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        if (largest.count(static_cast<std::int32_t>(i))) {
          ++sent;
          CHECK(out[u] == from_half(to_half(x[u])));
        } else {
          CHECK(out[u] == 0.0f);
        }
        if (ef) CHECK(R.c->residual()[u] == x[u] - out[u]);
      }
      CHECK(sent == k);
      CHECK(R.c->residual().size() == (ef ? static_cast<std::size_t>(n) : 0u));
      REQUIRE(R.c->exchanged().size() == 1);
      CHECK(R.c->exchanged()[0].op == Collective::AllGather);
      CHECK(R.c->exchanged()[0].bytes == 6 * k);
    });
  }
}

TEST_CASE("cpu/compression: random-k draws the same indices on every rank and all-reduces their values") {
  // 3 ranks, n = 500, ratio 0.1: k = 50 indices from the shared seed; the
  // output is Σ_r x_r at them (scaled by n/k = 10 without error feedback),
  // the same on every rank; each rank's residual is x_r with those zeroed.
  // A second step draws other indices.
  const std::int64_t n = 500, k = 50;
  const int ranks = 3;
  std::vector<std::vector<float>> x;
  Rng rng(5);
  for (int r = 0; r < ranks; ++r) x.push_back(test::random_vec(static_cast<std::size_t>(n), rng));
  Compression c = method(CompressionMethod::RandomK);
  c.ratio = 0.1;
  for (bool ef : {true, false}) {
    CAPTURE(ef);
    c.error_feedback = ef;
    std::vector<std::vector<float>> out(ranks), second(ranks);
    std::vector<std::vector<float>> residual(ranks);
    on_ranks(ranks, c, vector_layout(n), [&](RankCtx& R) {
      const auto r = static_cast<std::size_t>(R.rank);
      out[r] = run_exchange(R, x[r]);
      residual[r].assign(R.c->residual().begin(), R.c->residual().end());
      CHECK(R.c->exchanged()[0].op == Collective::AllReduce);
      CHECK(R.c->exchanged()[0].bytes == 4 * k);
      second[r] = run_exchange(R, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
    });
    std::set<std::int64_t> chosen, again;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      double sum = 0;
      for (int r = 0; r < ranks; ++r) sum += x[static_cast<std::size_t>(r)][u];
      if (out[0][u] != 0.0f) {
        chosen.insert(i);
        CHECK(out[0][u] == doctest::Approx(ef ? sum : sum * n / k).epsilon(1e-5));
      }
      if (second[0][u] != 0.0f) again.insert(i);
      for (int r = 0; r < ranks; ++r) {
        const auto q = static_cast<std::size_t>(r);
        CHECK(out[q][u] == out[0][u]);  // every rank decodes the same bits
        if (ef) CHECK(residual[q][u] == (chosen.count(i) ? 0.0f : x[q][u]));
      }
    }
    CHECK(chosen.size() == static_cast<std::size_t>(k));
    CHECK(again.size() == static_cast<std::size_t>(k));
    CHECK(again != chosen);
  }
}

TEST_CASE("cpu/compression: QSGD is unbiased and its levels lie in 0..2^bits - 1") {
  // bits 2: s = 3 levels of |x|/‖bucket‖ with a sign. n = 600 (buckets of
  // 512 and 88): every output is ±norm·l/s with integer l in 0..3 and x's
  // sign. Unbiased: over T = 4000 encodings of the same x, each mean is
  // within 6 standard errors of x_i, the rounding's standard deviation being
  // at most norm/(2s). Bytes: 2 norms + ⌈600·3/32⌉ = 57 words.
  const std::int64_t n = 600;
  const int T = 4000;
  Rng rng(9);
  const auto x = test::random_vec(static_cast<std::size_t>(n), rng);
  double norm[2] = {0, 0};
  for (std::int64_t i = 0; i < n; ++i) norm[i / 512] += static_cast<double>(x[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(i)];
  for (double& v : norm) v = static_cast<float>(std::sqrt(v));
  Compression c = method(CompressionMethod::Qsgd);
  c.bits = 2;
  std::vector<double> mean(static_cast<std::size_t>(n), 0.0);
  on_ranks(1, c, vector_layout(n), [&](RankCtx& R) {
    int bad = 0;
    for (int t = 0; t < T; ++t) {
      const auto out = run_exchange(R, x);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        const double level = std::fabs(out[u]) / norm[i / 512] * 3;
        if (std::fabs(level - std::round(level)) > 1e-4 || std::round(level) > 3 ||
            (out[u] != 0 && (out[u] < 0) != (x[u] < 0)))
          ++bad;
        mean[u] += out[u] / static_cast<double>(T);
      }
    }
    CHECK(bad == 0);
    CHECK(R.c->residual().empty());
    CHECK(R.c->exchanged()[0].op == Collective::AllGather);
    CHECK(R.c->exchanged()[0].bytes == 4 * (2 + 57));
  });
  int biased = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double se = norm[i / 512] / (2 * 3) / std::sqrt(static_cast<double>(T));
    if (std::fabs(mean[static_cast<std::size_t>(i)] - x[static_cast<std::size_t>(i)]) > 6 * se) ++biased;
  }
  CHECK(biased == 0);
}

TEST_CASE("cpu/compression: 1-bit sends sign times the mean |x| of each bucket of 512") {
  // One rank, n = 1000: the output is mean|x|·sign(x) with the mean over
  // [0, 512) and over [512, 1000), the residual x − output; the owner's
  // re-compression of that changes nothing (its residual ~0). Bytes: 2
  // scales + ⌈1000/32⌉ = 32 sign words, in both rounds.
  const std::int64_t n = 1000;
  Rng rng(13);
  const auto x = test::random_vec(static_cast<std::size_t>(n), rng);
  double mean_abs[2] = {0, 0};
  for (std::size_t i = 0; i < x.size(); ++i) mean_abs[i / 512] += std::fabs(x[i]) / (i < 512 ? 512.0 : 488.0);
  on_ranks(1, method(CompressionMethod::OneBit), vector_layout(n), [&](RankCtx& R) {
    const auto out = run_exchange(R, x);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double scale = mean_abs[i / 512];
      CHECK(out[i] == doctest::Approx(x[i] >= 0 ? scale : -scale).epsilon(1e-6));
      CHECK(R.c->residual()[i] == doctest::Approx(x[i] - out[i]).epsilon(1e-6));
      CHECK(std::fabs(R.c->chunk_residual()[i]) < 1e-6);
    }
    REQUIRE(R.c->exchanged().size() == 2);
    CHECK(R.c->exchanged()[0].op == Collective::ReduceScatter);
    CHECK(R.c->exchanged()[1].op == Collective::AllGather);
    CHECK(R.c->exchanged()[0].bytes == 4 * (2 + 32));
    CHECK(R.c->exchanged()[1].bytes == 4 * (2 + 32));
  });
}

// A layout of two matrices and a vector between them.
const FlatLayout kMixed = {{0, 40, 30, true}, {1200, 7, 1, false}, {1207, 20, 16, true}};
constexpr std::int64_t kMixedSize = 1207 + 320;

TEST_CASE("cpu/compression: PowerSGD reproduces a gradient of rank r, vectors exactly") {
  // 2 ranks; matrix 1 = A·B_rᵀ of rank 3 on rank r (their sum too), matrix
  // 2 of rank 2; rank 3: P̂ spans each sum's columns, P̂·Qᵀ = P̂P̂ᵀ·ΣM = ΣM
  // to fp32 precision, and the residuals (each rank's M − ΣM/2) sum to ~0.
  // Bytes: P (40·3 + 20·3) with the 7 vector entries, then Q (30·3 +
  // 16·3), fp32.
  Rng rng(17);
  auto low_rank = [&](std::int64_t rows, std::int64_t cols, std::int64_t r, const std::vector<float>& A) {
    const auto B = test::random_vec(static_cast<std::size_t>(cols * r), rng);
    std::vector<float> m(static_cast<std::size_t>(rows * cols), 0.0f);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j)
        for (std::int64_t q = 0; q < r; ++q)
          m[static_cast<std::size_t>(i * cols + j)] += A[static_cast<std::size_t>(i * r + q)] * B[static_cast<std::size_t>(j * r + q)];
    return m;
  };
  const auto A1 = test::random_vec(40 * 3, rng), A2 = test::random_vec(20 * 2, rng);
  std::vector<std::vector<float>> g(2);
  for (auto& v : g) {
    const auto m1 = low_rank(40, 30, 3, A1), m2 = low_rank(20, 16, 2, A2), vec = test::random_vec(7, rng);
    v.insert(v.end(), m1.begin(), m1.end());
    v.insert(v.end(), vec.begin(), vec.end());
    v.insert(v.end(), m2.begin(), m2.end());
  }
  Compression c = method(CompressionMethod::PowerSgd);
  c.rank = 3;
  std::vector<std::vector<float>> out(2), residual(2);
  on_ranks(2, c, kMixed, [&](RankCtx& R) {
    const auto r = static_cast<std::size_t>(R.rank);
    out[r] = run_exchange(R, g[r]);
    residual[r].assign(R.c->residual().begin(), R.c->residual().end());
    REQUIRE(R.c->exchanged().size() == 2);
    CHECK(R.c->exchanged()[0].bytes == 4 * (40 * 3 + 20 * 3 + 7));
    CHECK(R.c->exchanged()[1].bytes == 4 * (30 * 3 + 16 * 3));
  });
  for (std::size_t i = 0; i < static_cast<std::size_t>(kMixedSize); ++i) {
    const float sum = g[0][i] + g[1][i];
    CHECK(out[0][i] == out[1][i]);
    CHECK(std::fabs(residual[0][i] + residual[1][i]) < 1e-4);
    if (i >= 1200 && i < 1207)
      CHECK(out[0][i] == sum);
    else
      CHECK(out[0][i] == doctest::Approx(sum).epsilon(1e-4).scale(1.0));
  }
}

TEST_CASE("cpu/compression: error feedback: what was sent plus the residuals equals the gradients' sum") {
  // Over 6 steps of random gradients on 3 ranks: Σ_t decoded_t + Σ_r e_r
  // (+ 1-bit's chunk residuals) = Σ_t Σ_r g_r,t, to fp32 rounding, for
  // every method that keeps a residual.
  const int ranks = 3, steps = 6;
  Compression topk = method(CompressionMethod::TopK), randk = method(CompressionMethod::RandomK);
  topk.ratio = randk.ratio = 0.05;
  Compression power = method(CompressionMethod::PowerSgd);
  power.rank = 2;
  for (const Compression& c : {topk, randk, method(CompressionMethod::OneBit), power}) {
    CAPTURE(enum_name(c.method));
    const auto n = static_cast<std::size_t>(kMixedSize);
    std::vector<double> sent(n, 0.0), truth(n, 0.0), left(n, 0.0);
    std::mutex mu;
    on_ranks(ranks, c, kMixed, [&](RankCtx& R) {
      Rng rng(100 + static_cast<std::uint64_t>(R.rank));
      std::vector<double> mine(n, 0.0), decoded(n, 0.0);
      for (int t = 0; t < steps; ++t) {
        const auto g = test::random_vec(n, rng);
        for (std::size_t i = 0; i < n; ++i) mine[i] += g[i];
        const auto out = run_exchange(R, g);
        for (std::size_t i = 0; i < n; ++i) decoded[i] += out[i];
      }
      std::lock_guard lock(mu);
      for (std::size_t i = 0; i < n; ++i) {
        truth[i] += mine[i];
        left[i] += R.c->residual()[i];
        if (R.rank == 0) sent[i] = decoded[i];
      }
      const ChunkRange own = chunk_range(kMixedSize, ranks, R.rank);
      const auto server = R.c->chunk_residual();
      for (std::size_t i = 0; i < server.size(); ++i) left[static_cast<std::size_t>(own.begin) + i] += server[i];
    });
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + left[i] - truth[i]));
    CHECK(worst < 1e-4);
  }
}

// ---- against the lowering ------------------------------------------------------

strategies::Scenario tiny(std::int64_t dp, CompressionMethod m, bool tied) {
  strategies::Plan plan;
  plan.dp = dp;
  strategies::Scenario sc = test::small_gpt(
      {.layers = 2, .hidden = 32, .heads = 2, .ffn = 128, .vocab = 16, .seq = 16}, plan, 8, 8 / dp);
  sc.model.tied_embeddings = tied;
  sc.plan.compression.method = m;
  sc.plan.compression.ratio = 0.03;
  sc.plan.compression.bits = 5;
  sc.plan.compression.rank = 3;
  return sc;
}

TEST_CASE("cpu/compression: every round moves the bytes compressed_exchange prices") {
  // The lowering prices each round from the op chain; the compressor sends
  // what it packs. For a GPT's parameters (one stage: blocks, embedding,
  // head; tied and untied logits) at dp 2 and 4, fp32: the same operations
  // and bytes.
  for (auto m : {CompressionMethod::TopK, CompressionMethod::RandomK, CompressionMethod::Qsgd,
                 CompressionMethod::OneBit, CompressionMethod::PowerSgd})
    for (std::int64_t dp : {2, 4})
      for (bool tied : {true, false}) {
        CAPTURE(enum_name(m));
        CAPTURE(dp);
        CAPTURE(tied);
        const auto sc = tiny(dp, m, tied);
        const auto chain = cost::expand(sc.model, strategies::expand_options(sc));
        const auto predicted = strategies::compressed_exchange(
            sc.plan, chain, {{sc.model.layers}, true, true}, strategies::ModelStepCosts(sc));
        TrackingAllocator scratch;
        const GptModel model(sc.model, scratch, 1);
        std::vector<Shape> shapes;
        for (const auto& p : model.params()) shapes.push_back(p.shape());
        const FlatLayout layout = flat_layout(shapes);
        const std::int64_t n = layout.back().offset + layout.back().numel();
        CHECK(static_cast<double>(n) == strategies::StageGradients{{sc.model.layers}, true, true}.params(chain));
        std::vector<ExchangedRound> ran;
        on_ranks(static_cast<int>(dp), sc.plan.compression, layout, [&](RankCtx& R) {
          run_exchange(R, std::vector<float>(static_cast<std::size_t>(n), 0.5f));
          if (R.rank == 0) ran = R.c->exchanged();
        });
        REQUIRE(ran.size() == predicted.rounds.size());
        for (std::size_t i = 0; i < ran.size(); ++i) {
          CHECK(ran[i].op == predicted.rounds[i].first);
          CHECK(static_cast<double>(ran[i].bytes) == predicted.rounds[i].second);
        }
      }
}

// ---- training ------------------------------------------------------------------

// 200 steps of Adam (lr 3e-3, the `strata run` default) with dp 2 on the
// Markov corpus (vocabulary 16, seed 1; entropy rate 1.70 nats), global
// batch 16 of 16 tokens: the mean loss of the last 10 steps. About 0.6 s
// uncompressed in a RelWithDebInfo build, 0.6–0.9 s compressed.
double final_loss(const Compression& c) {
  set_blas_threads(1);
  auto sc = tiny(2, c.method, true);
  sc.batch = {16, 8};
  sc.plan.compression = c;
  const TrainReport r = train(sc, {.steps = 200, .seed = 1});
  double last = 0;
  for (std::size_t i = r.steps.size() - 10; i < r.steps.size(); ++i) last += r.steps[i].loss / 10;
  MESSAGE(enum_name(c.method) << ": loss " << r.steps.front().loss << " -> " << last
                              << " (mean of the last 10 of 200 steps)");
  return last;
}

// The uncompressed run, once per process.
double uncompressed() {
  static const double loss = final_loss(method(CompressionMethod::None));
  return loss;
}

// Settings the papers train with: top-k keeps 1–10 % (Aji & Heafield drop
// 99 %), QSGD 4 or 8 bits, PowerSGD rank 2 (Vogels et al. use 1–4). Measured
// on this test (final losses against 1.730 uncompressed): top-k 0.01 1.830
// (+5.8 %), 0.03 1.785, 0.1 1.741; random-k 0.1 1.867 (+8 %), 0.25 1.771;
// QSGD 4 bits 1.735; 1-bit 1.787; PowerSGD rank 1 1.789, rank 2 1.744.

TEST_CASE("cpu/compression: training with top-k (ratio 0.03, error feedback) ends within 5 % of uncompressed") {
  Compression c = method(CompressionMethod::TopK);
  c.ratio = 0.03;
  CHECK(final_loss(c) == doctest::Approx(uncompressed()).epsilon(0.05));
}

TEST_CASE("cpu/compression: training with random-k (ratio 0.25, error feedback) ends within 5 % of uncompressed") {
  // Random-k with a residual needs more entries than top-k: at 0.1 it ends
  // 8 % above (Stich et al. 2018: it converges, more slowly).
  Compression c = method(CompressionMethod::RandomK);
  c.ratio = 0.25;
  CHECK(final_loss(c) == doctest::Approx(uncompressed()).epsilon(0.05));
}

TEST_CASE("cpu/compression: training with QSGD (4 bits, no residual) ends within 5 % of uncompressed") {
  Compression c = method(CompressionMethod::Qsgd);
  c.bits = 4;
  CHECK(final_loss(c) == doctest::Approx(uncompressed()).epsilon(0.05));
}

TEST_CASE("cpu/compression: training with 1-bit (worker and server residuals) ends within 5 % of uncompressed") {
  CHECK(final_loss(method(CompressionMethod::OneBit)) == doctest::Approx(uncompressed()).epsilon(0.05));
}

TEST_CASE("cpu/compression: training with PowerSGD (rank 2, residual) ends within 5 % of uncompressed") {
  Compression c = method(CompressionMethod::PowerSgd);
  c.rank = 2;
  CHECK(final_loss(c) == doctest::Approx(uncompressed()).epsilon(0.05));
}

}  // namespace
}  // namespace strata::backend::cpu
