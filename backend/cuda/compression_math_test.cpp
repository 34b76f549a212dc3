// The CUDA compressors' arithmetic (compression_math.hpp) run on the host
// over whole gradients, bucket by bucket and word by word as the kernels of
// compression_kernels.cu split it, against backend/cpu/compression.cpp:
// every message must be the CPU's byte for byte, and so must the decoded
// sums and the residuals. Needs no GPU and no CUDA library (label unit).
#include "backend/cuda/compression_math.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/compression.hpp"
#include "backend/common/rng.hpp"
#include "backend/cuda/compression_test_util.hpp"
#include "strategies/plan.hpp"

namespace strata::backend::cuda::compression {
namespace {

using backend::Rng;
using strategies::Compression;
using strategies::CompressionMethod;
using namespace test;

static_assert(kQsgdBucket == strategies::kQsgdBucket);
static_assert(kOneBitBucket == strategies::kOneBitBucket);

// ---- the primitives ---------------------------------------------------------------

TEST_CASE("cuda/compression_math: xoshiro draws the CPU Rng's stream, and the jumps land where sequential draws do") {
  // Xoshiro::seeded(s) and backend::Rng(s) give the same 10,000 uniforms (bit
  // for bit); draws_map(d) applied to a state equals d advances; the state
  // of bucket b from bucket_jumps(512) equals 512·b draws, for b up to 300
  // (several bits set, every jump level below 2^9 used).
  for (std::uint64_t seed : {std::uint64_t{1}, std::uint64_t{7}, mix(7, kQsgdSalt + 1)}) {
    Rng cpu(seed);
    Xoshiro x = Xoshiro::seeded(seed);
    for (int i = 0; i < 10000; ++i) REQUIRE(x.uniform() == cpu.uniform());
  }
  const Xoshiro start = Xoshiro::seeded(42);
  for (std::uint64_t d : {0ULL, 1ULL, 2ULL, 3ULL, 511ULL, 1000ULL, 4097ULL}) {
    Xoshiro seq = start;
    for (std::uint64_t i = 0; i < d; ++i) seq.advance();
    const Gf2Map m = draws_map(d);
    const Xoshiro jumped = apply(m.data(), start);
    CAPTURE(d);
    for (int w = 0; w < 4; ++w) CHECK(jumped.s[w] == seq.s[w]);
  }
  const int levels = jump_levels(301);
  CHECK(levels == 9);
  const auto jumps = bucket_jumps(512, levels);
  Xoshiro seq = start;
  for (std::int64_t b = 0; b <= 300; ++b) {
    const Xoshiro j = jump_buckets(jumps.data(), b, start);
    CAPTURE(b);
    for (int w = 0; w < 4; ++w) REQUIRE(j.s[w] == seq.s[w]);
    for (int i = 0; i < 512; ++i) seq.advance();
  }
}

TEST_CASE("cuda/compression_math: fp16 conversion is the CPU's, bit for bit") {
  // Every half code converts to the CPU's float (bitwise, NaNs included);
  // special floats, every fp16 boundary region (each of the 2^16 high
  // halves of a float with 8 low patterns) and 10^6 random bit patterns
  // convert to the CPU's half.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto u = static_cast<std::uint16_t>(h);
    REQUIRE(bits_of(from_half(u)) == bits_of(cpu::from_half(u)));
  }
  auto same = [](float x) { REQUIRE(to_half(x) == cpu::to_half(x)); };
  for (float x : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, INFINITY, -INFINITY, NAN,
                  std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -25), 1e-30f})
    same(x);
  for (std::uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (std::uint32_t lo : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0xffffu})
      same(float_of((hi << 16) | lo));
  Rng rng(9);
  for (int i = 0; i < 1000000; ++i) same(float_of(static_cast<std::uint32_t>(rng.next())));
}

TEST_CASE("cuda/compression_math: chunk_begin cuts as the CPU's chunk_range") {
  // Chunk j of n over R ranks begins where cpu::chunk_range's does, for
  // sizes that do and do not divide.
  for (std::int64_t n : {0, 1, 7, 1000, 3001})
    for (int R = 1; R <= 5; ++R)
      for (int j = 0; j < R; ++j) {
        CHECK(chunk_begin(n, R, j) == cpu::chunk_range(n, R, j).begin);
        CHECK(chunk_begin(n, R, j + 1) == cpu::chunk_range(n, R, j).end);
      }
}

TEST_CASE("cuda/compression_math: read_bits reads what BitWriter wrote, at every width and offset") {
  // 1000 codes of width w (1..32) written in order are read back at bit i·w.
  Rng rng(4);
  for (int width = 1; width <= 32; ++width) {
    Words codes(1000), words(words_for_bits(1000 * width) + 1, 0);
    BitWriter out(words.data());
    for (auto& c : codes) {
      c = static_cast<std::uint32_t>(rng.next()) & static_cast<std::uint32_t>((std::uint64_t{1} << width) - 1);
      out.put(c, width);
    }
    out.flush();
    for (std::size_t i = 0; i < codes.size(); ++i)
      REQUIRE(read_bits(words.data(), static_cast<std::int64_t>(i) * width, width) == codes[i]);
  }
}

// ---- whole compressors, as the kernels split the work ----------------------------

// top-k on one rank: residual += g (if kept); the keys sorted descending,
// stably over increasing indices (what the device's radix sort does); the
// first k indices sorted; one value word per thread.
Words topk_encode(Floats& residual, const Floats& g, std::int64_t k) {
  Floats x = g;
  if (!residual.empty()) {
    add_into(residual, g);
    x = residual;
  }
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return magnitude_key(x[a]) > magnitude_key(x[b]); });
  std::sort(order.begin(), order.begin() + k);
  Words msg(static_cast<std::size_t>(topk_words(k)));
  for (std::int64_t j = 0; j < k; ++j) msg[static_cast<std::size_t>(j)] = static_cast<std::uint32_t>(order[j]);
  for (std::int64_t w = 0; w < (k + 1) / 2; ++w)
    msg[static_cast<std::size_t>(k + w)] =
        topk_value_word(x.data(), order.data(), k, w, residual.empty() ? nullptr : residual.data());
  return msg;
}

TEST_CASE("cuda/compression_math: top-k messages, sums and residuals are the CPU's, byte for byte") {
  // Sizes 1, 7, 1000, 3001 (odd, and with ties in |x|), ratios 0.01..1,
  // 1..3 ranks, 3 steps with and without error feedback: every rank's
  // message, the decoded sum (scatter-added rank by rank) and the residual.
  for (std::int64_t n : {1, 7, 1000, 3001})
    for (double ratio : {0.01, 0.3, 1.0})
      for (int ranks : {1, 3})
        for (bool ef : {true, false}) {
          CAPTURE(n);
          CAPTURE(ratio);
          CAPTURE(ranks);
          CAPTURE(ef);
          Compression c;
          c.method = CompressionMethod::TopK;
          c.ratio = ratio;
          c.error_feedback = ef;
          const auto g = gradients(n, ranks, 3, 100 + static_cast<std::uint64_t>(n));
          const auto cpu = run_cpu(c, n, ranks, g);
          const std::int64_t k = strategies::sparse_k(ratio, n);
          std::vector<Floats> residual(static_cast<std::size_t>(ranks), ef ? Floats(static_cast<std::size_t>(n), 0.0f) : Floats{});
          for (std::size_t s = 0; s < g.size(); ++s) {
            std::vector<Words> msgs;
            for (int r = 0; r < ranks; ++r) {
              const auto u = static_cast<std::size_t>(r);
              msgs.push_back(topk_encode(residual[u], g[s][u], k));
              REQUIRE(msgs.back() == cpu[s][u].payloads[0]);
              CHECK(bits(residual[u]) == bits(cpu[s][u].residual));
            }
            Floats out(static_cast<std::size_t>(n), 0.0f);
            for (const Words& m : msgs)
              for (std::int64_t j = 0; j < k; ++j) {
                float& o = out[m[static_cast<std::size_t>(j)]];
                o = fadd(o, topk_value(m.data(), k, j));
              }
            for (int r = 0; r < ranks; ++r) CHECK(bits(out) == bits(cpu[s][static_cast<std::size_t>(r)].out));
          }
        }
}

TEST_CASE("cuda/compression_math: random-k indices, values and residuals are the CPU's, byte for byte") {
  // The shared stream's selection (host side) and one gathered value per
  // thread, scaled by n/k without a residual; 1 and 3 ranks, 3 steps.
  for (std::int64_t n : {1, 9, 1000, 2049})
    for (int ranks : {1, 3})
      for (bool ef : {true, false}) {
        CAPTURE(n);
        CAPTURE(ranks);
        CAPTURE(ef);
        Compression c;
        c.method = CompressionMethod::RandomK;
        c.ratio = 0.1;
        c.error_feedback = ef;
        const auto g = gradients(n, ranks, 3, 200 + static_cast<std::uint64_t>(n));
        const auto cpu = run_cpu(c, n, ranks, g);
        const std::int64_t k = strategies::sparse_k(c.ratio, n);
        Xoshiro shared = Xoshiro::seeded(mix(7, kRandomKSalt));  // one per rank, all alike
        std::vector<Floats> residual(static_cast<std::size_t>(ranks), ef ? Floats(static_cast<std::size_t>(n), 0.0f) : Floats{});
        const float scale = ef ? 1.0f : static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
        for (std::size_t s = 0; s < g.size(); ++s) {
          std::vector<std::int32_t> idx(static_cast<std::size_t>(k));
          select_indices(shared, n, k, idx.data());
          std::vector<Floats> values;
          for (int r = 0; r < ranks; ++r) {
            const auto u = static_cast<std::size_t>(r);
            Floats x = g[s][u];
            if (ef) {
              add_into(residual[u], g[s][u]);
              x = residual[u];
            }
            Floats v(static_cast<std::size_t>(k));
            for (std::int64_t q = 0; q < k; ++q) {
              v[static_cast<std::size_t>(q)] = fmul(x[static_cast<std::size_t>(idx[q])], scale);
              if (ef) residual[u][static_cast<std::size_t>(idx[q])] = 0.0f;
            }
            REQUIRE(bits(v) == cpu[s][u].payloads[0]);
            CHECK(bits(residual[u]) == bits(cpu[s][u].residual));
            values.push_back(std::move(v));
          }
          const Floats sum = ring_sum(values);
          Floats out(static_cast<std::size_t>(n), 0.0f);
          for (std::int64_t q = 0; q < k; ++q) out[static_cast<std::size_t>(idx[q])] = sum[static_cast<std::size_t>(q)];
          CHECK(bits(out) == bits(cpu[s][0].out));
        }
      }
}

TEST_CASE("cuda/compression_math: QSGD messages and sums are the CPU's, byte for byte") {
  // Each bucket from its own jumped stream state (the kernel's thread per
  // bucket), bits 1, 2, 4, 8 and 16 (codes of 2..17 bits, straddling
  // words), sizes 1, 511, 513, 1537 and 3001, 1 and 2 ranks, 3 steps (the
  // stream moves on n draws a step).
  for (int b : {1, 2, 4, 8, 16})
    for (std::int64_t n : {1, 511, 513, 1537, 3001})
      for (int ranks : {1, 2}) {
        CAPTURE(b);
        CAPTURE(n);
        CAPTURE(ranks);
        Compression c;
        c.method = CompressionMethod::Qsgd;
        c.bits = b;
        const auto g = gradients(n, ranks, 3, 300 + static_cast<std::uint64_t>(n));
        const auto cpu = run_cpu(c, n, ranks, g);
        const int width = b + 1;
        const double levels = static_cast<double>((std::uint32_t{1} << b) - 1);
        const std::int64_t buckets = qsgd_buckets(n), words = qsgd_words(n, b);
        const auto jumps = bucket_jumps(kQsgdBucket, jump_levels(buckets));
        const Gf2Map step = draws_map(static_cast<std::uint64_t>(n));
        std::vector<Xoshiro> base;
        for (int r = 0; r < ranks; ++r) base.push_back(Xoshiro::seeded(mix(7, kQsgdSalt + static_cast<std::uint64_t>(r))));
        for (std::size_t s = 0; s < g.size(); ++s) {
          std::vector<Words> msgs;
          for (int r = 0; r < ranks; ++r) {
            const auto u = static_cast<std::size_t>(r);
            Words msg(static_cast<std::size_t>(words), 0u);
            for (std::int64_t k = 0; k < buckets; ++k) {
              const std::int64_t lo = k * kQsgdBucket, hi = std::min(n, lo + kQsgdBucket);
              qsgd_encode_bucket(g[s][u].data(), lo, hi, jump_buckets(jumps.data(), k, base[u]), levels, width,
                                 msg.data() + k, msg.data() + buckets + lo * width / 32);
            }
            base[u] = apply(step.data(), base[u]);
            REQUIRE(msg == cpu[s][u].payloads[0]);
            msgs.push_back(std::move(msg));
          }
          Floats out(static_cast<std::size_t>(n), 0.0f);
          for (std::int64_t i = 0; i < n; ++i)
            for (const Words& m : msgs) out[static_cast<std::size_t>(i)] = fadd(out[static_cast<std::size_t>(i)], qsgd_value(m.data(), buckets, i, width, levels));
          for (int r = 0; r < ranks; ++r) CHECK(bits(out) == bits(cpu[s][static_cast<std::size_t>(r)].out));
        }
      }
}

TEST_CASE("cuda/compression_math: 1-bit blocks, server blocks, sums and both residuals are the CPU's, byte for byte") {
  // Worker blocks per (chunk, bucket), the all-to-all, the chunk owner's
  // sum in rank order onto its server residual compressed again, the
  // all-gather and the decode; sizes 1, 7, 1025, 3001; 1..3 ranks; 3 steps.
  for (std::int64_t n : {1, 7, 1025, 3001})
    for (int ranks : {1, 2, 3}) {
      CAPTURE(n);
      CAPTURE(ranks);
      Compression c;
      c.method = CompressionMethod::OneBit;
      const auto g = gradients(n, ranks, 3, 400 + static_cast<std::uint64_t>(n));
      const auto cpu = run_cpu(c, n, ranks, g);
      const std::int64_t most = (n + ranks - 1) / ranks;
      const std::int64_t scales = (most + kOneBitBucket - 1) / kOneBitBucket;
      const std::int64_t block = scales + words_for_bits(most);
      std::vector<Floats> residual(static_cast<std::size_t>(ranks), Floats(static_cast<std::size_t>(n), 0.0f));
      std::vector<Floats> server;
      for (int r = 0; r < ranks; ++r)
        server.emplace_back(static_cast<std::size_t>(chunk_begin(n, ranks, r + 1) - chunk_begin(n, ranks, r)), 0.0f);
      std::vector<Words> send(static_cast<std::size_t>(ranks), Words(static_cast<std::size_t>(block * ranks), 0u));
      auto compress = [&](const float* x, std::int64_t size, std::uint32_t* blk, float* e) {
        for (std::int64_t lo = 0; lo < size; lo += kOneBitBucket)
          onebit_compress_bucket(x, lo, std::min(size, lo + kOneBitBucket), blk, blk + scales + lo / 32, e);
      };
      for (std::size_t s = 0; s < g.size(); ++s) {
        for (int r = 0; r < ranks; ++r) {
          const auto u = static_cast<std::size_t>(r);
          add_into(residual[u], g[s][u]);
          for (int j = 0; j < ranks; ++j) {
            const std::int64_t lo = chunk_begin(n, ranks, j);
            compress(residual[u].data() + lo, chunk_begin(n, ranks, j + 1) - lo, send[u].data() + j * block,
                     residual[u].data() + lo);
          }
          REQUIRE(send[u] == cpu[s][u].payloads[0]);
          CHECK(bits(residual[u]) == bits(cpu[s][u].residual));
        }
        // Round 0: rank r gets every rank's block r and reduces its chunk.
        for (int r = 0; r < ranks; ++r) {
          const auto u = static_cast<std::size_t>(r);
          const auto size = static_cast<std::int64_t>(server[u].size());
          for (std::int64_t i = 0; i < size; ++i)
            for (int j = 0; j < ranks; ++j)
              server[u][static_cast<std::size_t>(i)] =
                  fadd(server[u][static_cast<std::size_t>(i)], onebit_value(send[static_cast<std::size_t>(j)].data() + r * block, scales, i));
        }
        for (int r = 0; r < ranks; ++r) {
          const auto u = static_cast<std::size_t>(r);
          compress(server[u].data(), static_cast<std::int64_t>(server[u].size()), send[u].data() + r * block, server[u].data());
          REQUIRE(Words(send[u].begin() + r * block, send[u].begin() + (r + 1) * block) == cpu[s][u].payloads[1]);
          CHECK(bits(server[u]) == bits(cpu[s][u].chunk_residual));
        }
        // Round 1: every rank gets every owner's block.
        for (int r = 0; r < ranks; ++r)
          for (int j = 0; j < ranks; ++j)
            std::copy_n(send[static_cast<std::size_t>(j)].begin() + j * block, block, send[static_cast<std::size_t>(r)].begin() + j * block);
        Floats out(static_cast<std::size_t>(n), 0.0f);
        for (int j = 0; j < ranks; ++j) {
          const std::int64_t lo = chunk_begin(n, ranks, j);
          for (std::int64_t i = lo; i < chunk_begin(n, ranks, j + 1); ++i)
            out[static_cast<std::size_t>(i)] = fadd(0.0f, onebit_value(send[0].data() + j * block, scales, i - lo));
        }
        for (int r = 0; r < ranks; ++r) CHECK(bits(out) == bits(cpu[s][static_cast<std::size_t>(r)].out));
      }
    }
}

}  // namespace
}  // namespace strata::backend::cuda::compression
