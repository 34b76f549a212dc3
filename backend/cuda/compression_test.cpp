// The device compressors against the CPU's (backend/cpu/compression.hpp):
// two ranks simulated on one GPU, each with its own DeviceCompressor; the
// test plays the collectives (host copies between the ranks' buffers, the
// all-reduce summed as the CPU's ring sums two ranks). Messages, decoded
// sums and residuals must be the CPU's byte for byte, PowerSGD's to fp32
// rounding. Needs a GPU (label gpu).
#include "backend/cuda/compression.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/compression_test_util.hpp"

namespace strata::backend::cuda {
namespace {

using compression::test::bits;
using compression::test::CpuStep;
using compression::test::Floats;
using compression::test::gradients;
using compression::test::run_cpu;
using compression::test::Words;
using strategies::Compression;
using strategies::CompressionMethod;

constexpr int kRanks = 2;

std::vector<unsigned char> fetch(const void* p, std::int64_t bytes) {
  std::vector<unsigned char> out(static_cast<std::size_t>(bytes));
  if (bytes > 0) STRATA_CUDA_CHECK(cudaMemcpy(out.data(), p, out.size(), cudaMemcpyDeviceToHost));
  return out;
}
void put(void* p, const void* host, std::int64_t bytes) {
  if (bytes > 0) STRATA_CUDA_CHECK(cudaMemcpy(p, host, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice));
}
Words as_words(const std::vector<unsigned char>& b) {
  Words w(b.size() / 4);
  if (!w.empty()) std::memcpy(w.data(), b.data(), b.size());
  return w;
}
Floats as_floats(const std::vector<unsigned char>& b) {
  Floats f(b.size() / 4);
  if (!f.empty()) std::memcpy(f.data(), b.data(), b.size());
  return f;
}

Floats from_words(const Words& w) {
  Floats f(w.size());
  if (!f.empty()) std::memcpy(f.data(), w.data(), 4 * w.size());
  return f;
}

// What this rank sends in the round: count elements, ranks·count for AllToAll.
std::int64_t payload_words(const CompressRound& x) {
  return x.op == CompressCollective::AllToAll ? kRanks * x.count : x.count;
}

// Runs round x (one per rank) between the ranks' device buffers, as NCCL would.
void play(const std::vector<CompressRound>& x) {
  STRATA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::int64_t bytes = 4 * x[0].count;
  switch (x[0].op) {
    case CompressCollective::AllGather:
      for (int r = 0; r < kRanks; ++r) {
        const auto mine = fetch(x[static_cast<std::size_t>(r)].send, bytes);
        for (int to = 0; to < kRanks; ++to)
          put(static_cast<unsigned char*>(x[static_cast<std::size_t>(to)].recv) + r * bytes, mine.data(), bytes);
      }
      break;
    case CompressCollective::AllReduce: {
      // Two ranks: every chunk is x[other] + x[owner], one addition, which
      // commutes: the CPU's ring sum, bit for bit.
      const Floats a = as_floats(fetch(x[0].send, bytes)), b = as_floats(fetch(x[1].send, bytes));
      Floats sum(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
      for (const auto& xr : x) put(xr.recv, sum.data(), bytes);
      break;
    }
    case CompressCollective::AllToAll:
      for (int r = 0; r < kRanks; ++r) {
        const auto all = fetch(x[static_cast<std::size_t>(r)].send, kRanks * bytes);
        for (int to = 0; to < kRanks; ++to)
          put(static_cast<unsigned char*>(x[static_cast<std::size_t>(to)].recv) + r * bytes, all.data() + to * bytes, bytes);
      }
      break;
  }
}

// Runs `c` for 3 steps on the device and on the CPU and compares; PowerSGD
// (`exact` false) to a relative 1e-4 of the largest |value| of each buffer.
void compare(const Compression& c, std::int64_t n, const backend::FlatLayout& layout, bool exact) {
  const auto g = gradients(n, kRanks, 3, 500 + static_cast<std::uint64_t>(n));
  const auto cpu = run_cpu(c, n, kRanks, g, layout);
  DeviceAllocator alloc(0);
  Blas blas(alloc);
  std::vector<std::unique_ptr<DeviceCompressor>> dev;
  std::vector<DeviceTensor> grad, out;
  for (int r = 0; r < kRanks; ++r) {
    dev.push_back(make_device_compressor({.method = c, .ranks = kRanks, .rank = r, .seed = 7}, layout, alloc, blas));
    grad.emplace_back(alloc, Shape{n}, MemTag::Grads);
    out.emplace_back(alloc, Shape{n}, MemTag::Grads);
  }
  auto same = [&](const Floats& got, const Floats& want, const char* what) {
    CAPTURE(what);
    REQUIRE(got.size() == want.size());
    if (exact) {
      CHECK(bits(got) == bits(want));
      return;
    }
    double scale = 1e-30;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += std::fabs(static_cast<double>(got[i]) - want[i]) > 1e-4 * scale;
    CHECK(bad == 0);
  };
  for (std::size_t s = 0; s < g.size(); ++s) {
    CAPTURE(s);
    for (int r = 0; r < kRanks; ++r) {
      grad[static_cast<std::size_t>(r)].upload(g[s][static_cast<std::size_t>(r)]);
      dev[static_cast<std::size_t>(r)]->encode(grad[static_cast<std::size_t>(r)].data());
    }
    for (int round = 0; round < dev[0]->rounds(); ++round) {
      std::vector<CompressRound> x;
      for (auto& d : dev) x.push_back(d->round(round));
      STRATA_CUDA_CHECK(cudaDeviceSynchronize());
      for (int r = 0; r < kRanks; ++r) {
        const CpuStep& want = cpu[s][static_cast<std::size_t>(r)];
        const CompressRound& xr = x[static_cast<std::size_t>(r)];
        const auto sent = fetch(xr.payload(), 4 * payload_words(xr));
        if (want.payloads[static_cast<std::size_t>(round)].empty()) continue;  // PowerSGD's Q
        const Words& cpu_sent = want.payloads[static_cast<std::size_t>(round)];
        if (exact) CHECK(as_words(sent) == cpu_sent);
        else same(as_floats(sent), from_words(cpu_sent), "payload");
      }
      play(x);
    }
    for (int r = 0; r < kRanks; ++r) {
      const auto u = static_cast<std::size_t>(r);
      dev[u]->decode(out[u].data());
      same(out[u].download(), cpu[s][u].out, "decoded sum");
      const float* e = dev[u]->residual();
      same(e ? as_floats(fetch(e, 4 * n)) : Floats{}, cpu[s][u].residual, "residual");
      const float* ce = dev[u]->chunk_residual();
      same(ce ? as_floats(fetch(ce, 4 * dev[u]->chunk_residual_size())) : Floats{}, cpu[s][u].chunk_residual,
           "chunk residual");
      CHECK(dev[u]->exchanged().size() == static_cast<std::size_t>(dev[u]->rounds()));
    }
  }
}

Compression method(CompressionMethod m) {
  Compression c;
  c.method = m;
  return c;
}

TEST_CASE("cuda/compression: top-k on two ranks is the CPU's, byte for byte") {
  // Sizes with ties in |x| and values beyond fp16, ratios 0.01 and 0.3,
  // with and without error feedback, 3 steps.
  for (std::int64_t n : {7, 3001, 100003})
    for (double ratio : {0.01, 0.3})
      for (bool ef : {true, false}) {
        CAPTURE(n);
        CAPTURE(ratio);
        CAPTURE(ef);
        Compression c = method(CompressionMethod::TopK);
        c.ratio = ratio;
        c.error_feedback = ef;
        compare(c, n, {{0, n, 1, false}}, true);
      }
}

TEST_CASE("cuda/compression: random-k on two ranks is the CPU's, byte for byte") {
  // The host's selection and the device's gather and scatter, 3 steps.
  for (std::int64_t n : {9, 100003})
    for (bool ef : {true, false}) {
      CAPTURE(n);
      CAPTURE(ef);
      Compression c = method(CompressionMethod::RandomK);
      c.ratio = 0.1;
      c.error_feedback = ef;
      compare(c, n, {{0, n, 1, false}}, true);
    }
}

TEST_CASE("cuda/compression: QSGD on two ranks is the CPU's, byte for byte") {
  // Bits 2, 8 and 16; sizes that end in a partial bucket; 3 steps (the
  // jumped streams must stay in step with the CPU's sequential ones).
  for (int b : {2, 8, 16})
    for (std::int64_t n : {1, 1537, 100003}) {
      CAPTURE(b);
      CAPTURE(n);
      Compression c = method(CompressionMethod::Qsgd);
      c.bits = b;
      compare(c, n, {{0, n, 1, false}}, true);
    }
}

TEST_CASE("cuda/compression: 1-bit on two ranks is the CPU's, byte for byte") {
  // Worker blocks, the all-to-all, the owners' server blocks, the
  // all-gather; both residuals; 3 steps.
  for (std::int64_t n : {1, 1025, 100003}) {
    CAPTURE(n);
    compare(method(CompressionMethod::OneBit), n, {{0, n, 1, false}}, true);
  }
}

TEST_CASE("cuda/compression: PowerSGD on two ranks is the CPU's to fp32 rounding") {
  // Matrices 64 × 48 and 300 × 7 (rank 4 and min(4, 7)), a vector of 33,
  // a 1 × 5 matrix (rank 1); P, the decoded sum and the residual within
  // 1e-4 of each buffer's largest value (cuBLAS sums in another order).
  const backend::FlatLayout layout = {{0, 64, 48, true}, {3072, 33, 1, false}, {3105, 300, 7, true}, {5205, 1, 5, true}};
  Compression c = method(CompressionMethod::PowerSgd);
  c.rank = 4;
  compare(c, 5210, layout, false);
}

}  // namespace
}  // namespace strata::backend::cuda
