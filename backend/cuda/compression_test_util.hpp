#pragma once
// Shared by the CUDA compressors' tests (compression_math_test.cpp on the
// host, compression_test.cpp on a GPU): the CPU compressors run on rank
// threads with every payload recorded, and gradients with the cases that
// matter. Needs no CUDA header.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <numeric>
#include <thread>
#include <vector>

#include "backend/cpu/comm.hpp"
#include "backend/cpu/compression.hpp"
#include "backend/common/rng.hpp"
#include "backend/cpu/test_util.hpp"
#include "backend/cuda/compression_math.hpp"

namespace strata::backend::cuda::compression::test {

using backend::Rng;
using strategies::Compression;
using Words = std::vector<std::uint32_t>;
using Floats = std::vector<float>;

// Bitwise float comparison (NaN payloads and the sign of zero included).
inline Words bits(const Floats& v) {
  Words w(v.size());
  if (!v.empty()) std::memcpy(w.data(), v.data(), 4 * v.size());
  return w;
}

// ---- the CPU compressors, `ranks` threads, recording every payload ----------

struct CpuStep {
  std::vector<Words> payloads;  // per round, as sent
  Floats out, residual, chunk_residual;
};

// Runs `steps` steps of the CPU compressor on `ranks` rank threads with
// grads[step][rank]; result[step][rank]. The gradient is one vector of n
// unless `layout` says otherwise.
inline std::vector<std::vector<CpuStep>> run_cpu(const Compression& method, std::int64_t n, int ranks,
                                                 const std::vector<std::vector<Floats>>& grads,
                                                 backend::FlatLayout layout = {}) {
  if (layout.empty()) layout = {{0, n, 1, false}};
  const auto steps = grads.size();
  std::vector<std::vector<CpuStep>> res(steps, std::vector<CpuStep>(static_cast<std::size_t>(ranks)));
  cpu::CommWorld world(ranks);
  std::vector<int> members(static_cast<std::size_t>(ranks));
  std::iota(members.begin(), members.end(), 0);
  cpu::test::run_ranks(world, [&](int r) {
    cpu::TrackingAllocator alloc;
    cpu::Comm comm(world.group(members), r, alloc);
    auto c = cpu::make_compressor({.method = method, .ranks = ranks, .rank = r, .seed = 7}, layout, alloc);
    for (std::size_t s = 0; s < steps; ++s) {
      CpuStep& st = res[s][static_cast<std::size_t>(r)];
      c->encode(grads[s][static_cast<std::size_t>(r)]);
      for (int i = 0; i < c->rounds(); ++i) {
        st.payloads.emplace_back(c->payload().begin(), c->payload().end());
        c->round(i, comm);
      }
      st.out.resize(static_cast<std::size_t>(n));
      c->decode(st.out);
      st.residual.assign(c->residual().begin(), c->residual().end());
      st.chunk_residual.assign(c->chunk_residual().begin(), c->chunk_residual().end());
    }
  });
  return res;
}

// Gradients with the cases that matter: ties in |x| (values on a grid of
// 1/4, both signs), zeros of both signs, a bucket of zeros, and values
// beyond fp16's range.
inline std::vector<std::vector<Floats>> gradients(std::int64_t n, int ranks, int steps, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<Floats>> g(static_cast<std::size_t>(steps));
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < ranks; ++r) {
      Floats v(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) {
        const double z = rng.normal();
        float x = static_cast<float>(z);
        if (i % 3 == 0) x = static_cast<float>(std::round(z * 4) / 4);  // ties
        if (i % 97 == 5) x = -0.0f;
        if (i % 1009 == 17) x = static_cast<float>(z * 1e5);  // past fp16
        if (i >= 512 && i < 1024 && s == 1) x = 0.0f;  // a zero bucket
        v[static_cast<std::size_t>(i)] = x;
      }
      g[static_cast<std::size_t>(s)].push_back(std::move(v));
    }
  return g;
}

inline void add_into(Floats& acc, const Floats& g) {
  for (std::size_t i = 0; i < g.size(); ++i) acc[i] = fadd(acc[i], g[i]);
}

// The sum over ranks of floats the CPU's ring all-reduce gives: chunk c
// (chunk_range(k, R, c)) summed from member c + 1 round to member c.
inline Floats ring_sum(const std::vector<Floats>& x) {
  const int R = static_cast<int>(x.size());
  const auto k = static_cast<std::int64_t>(x[0].size());
  Floats out(x[0].size());
  for (int c = 0; c < R; ++c)
    for (std::int64_t q = chunk_begin(k, R, c); q < chunk_begin(k, R, c + 1); ++q) {
      float s = x[static_cast<std::size_t>((c + 1) % R)][static_cast<std::size_t>(q)];
      for (int t = 2; t <= R; ++t) s = fadd(s, x[static_cast<std::size_t>((c + t) % R)][static_cast<std::size_t>(q)]);
      out[static_cast<std::size_t>(q)] = s;
    }
  return out;
}

}  // namespace strata::backend::cuda::compression::test
