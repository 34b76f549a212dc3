#include "backend/cpu/comm.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "backend/common/rng.hpp"
#include "backend/cpu/test_util.hpp"
#include "strategies/rank_mesh.hpp"

using namespace strata;
using namespace strata::backend::cpu;
using strata::backend::Rng;

namespace {

using strata::backend::cpu::test::run_ranks;

std::vector<int> all_ranks(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("cpu/comm: chunk ranges cover the elements in order, sizes differ by at most one") {
  // floor(S·i/n) boundaries: 5 over 3 gives [0,1) [1,3) [3,5).
  CHECK(chunk_range(5, 3, 0).begin == 0);
  CHECK(chunk_range(5, 3, 0).end == 1);
  CHECK(chunk_range(5, 3, 1).end == 3);
  CHECK(chunk_range(5, 3, 2).end == 5);
  for (std::int64_t S : {0, 1, 7, 64, 1001})
    for (int n = 1; n <= 8; ++n) {
      std::int64_t at = 0;
      for (int i = 0; i < n; ++i) {
        const auto c = chunk_range(S, n, i);
        CHECK(c.begin == at);
        CHECK(c.size() >= S / n);
        CHECK(c.size() <= (S + n - 1) / n);
        at = c.end;
      }
      CHECK(at == S);
    }
}

TEST_CASE("cpu/comm: all-reduce, reduce-scatter and all-gather on 1 to 8 threads give the closed-form sums") {
  // Rank r holds x_r[i] = (r+1)(i+1): the sum is (i+1)·n(n+1)/2, exact in
  // fp32 for these sizes. Sizes include S < n (empty chunks) and S not
  // divisible by n.
  for (int n = 1; n <= 8; ++n)
    for (std::int64_t S : {0, 1, 5, 7, 13, 100}) {
      CAPTURE(n);
      CAPTURE(S);
      CommWorld world(n);
      std::vector<TrackingAllocator> allocs(static_cast<std::size_t>(n));
      std::vector<int> bad(static_cast<std::size_t>(n), 0);
      run_ranks(world, [&](int r) {
        Comm c(world.group(all_ranks(n)), r, allocs[static_cast<std::size_t>(r)]);
        const float tri = static_cast<float>(n * (n + 1) / 2);
        std::vector<float> x(static_cast<std::size_t>(S));
        auto fill = [&] {
          for (std::int64_t i = 0; i < S; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>((r + 1) * (i + 1));
        };
        fill();
        c.all_reduce(x);
        for (std::int64_t i = 0; i < S; ++i)
          bad[static_cast<std::size_t>(r)] += x[static_cast<std::size_t>(i)] != static_cast<float>(i + 1) * tri;
        fill();
        const auto mine = chunk_range(S, n, r);
        std::vector<float> part(static_cast<std::size_t>(mine.size()));
        c.reduce_scatter(x, part);
        for (std::int64_t i = 0; i < mine.size(); ++i)
          bad[static_cast<std::size_t>(r)] +=
              part[static_cast<std::size_t>(i)] != static_cast<float>(mine.begin + i + 1) * tri;
        // All-gather of chunk r holding 1000·r + i gives each chunk back in place.
        for (std::int64_t i = 0; i < mine.size(); ++i)
          part[static_cast<std::size_t>(i)] = static_cast<float>(1000 * r + i);
        std::vector<float> all(static_cast<std::size_t>(S), -1.0f);
        c.all_gather(part, all);
        for (int q = 0; q < n; ++q) {
          const auto cq = chunk_range(S, n, q);
          for (std::int64_t i = 0; i < cq.size(); ++i)
            bad[static_cast<std::size_t>(r)] +=
                all[static_cast<std::size_t>(cq.begin + i)] != static_cast<float>(1000 * q + i);
        }
      });
      for (int r = 0; r < n; ++r) CHECK(bad[static_cast<std::size_t>(r)] == 0);
    }
}

TEST_CASE("cpu/comm: broadcast and all-to-all move the blocks the definitions say") {
  // Broadcast from root 2 of 5: every rank ends with the root's 0.5·i.
  // All-to-all: block j of rank r holds 10r + j; afterwards block j of rank r
  // holds 10j + r (the transpose).
  for (int n : {1, 2, 3, 5, 8}) {
    CAPTURE(n);
    CommWorld world(n);
    std::vector<TrackingAllocator> allocs(static_cast<std::size_t>(n));
    std::vector<int> bad(static_cast<std::size_t>(n), 0);
    const int root = n / 2;
    run_ranks(world, [&](int r) {
      Comm c(world.group(all_ranks(n)), r, allocs[static_cast<std::size_t>(r)]);
      std::vector<float> x(11, r == root ? 0.0f : -7.0f);
      if (r == root)
        for (int i = 0; i < 11; ++i) x[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i);
      c.broadcast(x, root);
      for (int i = 0; i < 11; ++i) bad[static_cast<std::size_t>(r)] += x[static_cast<std::size_t>(i)] != 0.5f * static_cast<float>(i);
      const int B = 3;
      std::vector<float> in(static_cast<std::size_t>(n * B)), out(in.size());
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < B; ++k) in[static_cast<std::size_t>(j * B + k)] = static_cast<float>(10 * r + j) + 0.25f * static_cast<float>(k);
      c.all_to_all(in, out);
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < B; ++k)
          bad[static_cast<std::size_t>(r)] += out[static_cast<std::size_t>(j * B + k)] != static_cast<float>(10 * j + r) + 0.25f * static_cast<float>(k);
    });
    for (int r = 0; r < n; ++r) CHECK(bad[static_cast<std::size_t>(r)] == 0);
  }
}

TEST_CASE("cpu/comm: ring step counts and bytes per rank follow the ring algorithms") {
  // n members, S = 12·n elements: reduce-scatter and all-gather take n−1
  // steps sending S/n each; all-reduce 2(n−1) steps, 2(n−1)·S/n elements;
  // all-to-all n−1 steps of one block. Staging: two buffers of S/n floats.
  for (int n : {2, 3, 4, 8}) {
    CAPTURE(n);
    const std::int64_t S = 12 * n;
    CommWorld world(n);
    std::vector<TrackingAllocator> allocs(static_cast<std::size_t>(n));
    std::vector<CommCounters> after_ar(static_cast<std::size_t>(n)), after_all(static_cast<std::size_t>(n));
    run_ranks(world, [&](int r) {
      Comm c(world.group(all_ranks(n)), r, allocs[static_cast<std::size_t>(r)]);
      std::vector<float> x(static_cast<std::size_t>(S), 1.0f), part(12);
      c.all_reduce(x);
      after_ar[static_cast<std::size_t>(r)] = c.counters();
      c.reduce_scatter(x, part);
      c.all_gather(part, x);
      std::vector<float> y(x.size());
      c.all_to_all(x, y);
      after_all[static_cast<std::size_t>(r)] = c.counters();
    });
    for (int r = 0; r < n; ++r) {
      const auto& a = after_ar[static_cast<std::size_t>(r)];
      CHECK(a.ring_steps == 2 * (n - 1));
      CHECK(a.elements_sent == 2 * (n - 1) * S / n);
      CHECK(a.collectives == 1);
      const auto& b = after_all[static_cast<std::size_t>(r)];
      CHECK(b.ring_steps == 2 * (n - 1) + (n - 1) + (n - 1) + (n - 1));
      CHECK(b.elements_sent == 2 * (n - 1) * S / n + 2 * (n - 1) * S / n + (n - 1) * S / n);
      const auto st = allocs[static_cast<std::size_t>(r)].stats();
      CHECK(st.peak[static_cast<std::size_t>(MemTag::CommBuffers)] == 2 * 12 * 4);
    }
    // The handles died with their threads, and their staging with them.
    for (auto& a : allocs) CHECK(a.stats().current_total == 0);
  }
}

TEST_CASE("cpu/comm: all-reduce of random floats is bit-identical on every rank and run to run") {
  // Chunk c is summed in the fixed ring order from member c+1, so thread
  // timing cannot change the bits.
  const int n = 5;
  const std::int64_t S = 1003;
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 3; ++run) {
    CommWorld world(n);
    std::vector<TrackingAllocator> allocs(n);
    std::vector<std::vector<float>> result(n);
    run_ranks(world, [&](int r) {
      Comm c(world.group(all_ranks(n)), r, allocs[static_cast<std::size_t>(r)]);
      Rng rng(static_cast<std::uint64_t>(100 + r));
      std::vector<float> x(S);
      for (auto& v : x) v = static_cast<float>(rng.normal());
      c.all_reduce(x);
      result[static_cast<std::size_t>(r)] = x;
    });
    for (int r = 1; r < n; ++r)
      CHECK(std::memcmp(result[0].data(), result[static_cast<std::size_t>(r)].data(), S * sizeof(float)) == 0);
    if (run == 0)
      first = result;
    else
      CHECK(std::memcmp(first[0].data(), result[0].data(), S * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu/comm: sub-groups of a tp2 x dp2 x pp2 mesh reduce at the same time without mixing") {
  // Every rank all-reduces 2^rank over its tp group, then over its dp group,
  // then over its pp group, concurrently with the other groups: each sum is
  // the sum of 2^member over exactly the mesh's members.
  strategies::Plan plan;
  plan.tp = 2;
  plan.dp = 2;
  plan.pp = 2;
  const strategies::RankMesh mesh(plan, 8);
  CommWorld world(8);
  std::vector<TrackingAllocator> allocs(8);
  std::vector<int> bad(8, 0);
  run_ranks(world, [&](int r) {
    for (auto dim : {strategies::MeshDim::TP, strategies::MeshDim::DP, strategies::MeshDim::PP}) {
      std::vector<int> members;
      float expected = 0;
      for (auto m : mesh.group_of(r, dim)) {
        members.push_back(static_cast<int>(m));
        expected += static_cast<float>(1 << m);
      }
      Comm c(world.group(members), r, allocs[static_cast<std::size_t>(r)]);
      std::vector<float> x(9, static_cast<float>(1 << r));
      c.all_reduce(x);
      for (float v : x) bad[static_cast<std::size_t>(r)] += v != expected;
    }
  });
  for (int r = 0; r < 8; ++r) CHECK(bad[static_cast<std::size_t>(r)] == 0);
}

TEST_CASE("cpu/comm: send and receive match by peer and tag, in send order, with staging freed on receipt") {
  // Rank 0 sends tags 2, 1, 1 to rank 1; rank 1 receives tag 1 twice (first
  // the first one sent) and then tag 2. Rank 1 starts receiving only once all
  // three sends are staged, so the sender's staging peak is exactly the three
  // messages (without the wait, a receipt between two sends frees one early
  // and the peak depends on thread timing).
  CommWorld world(2);
  std::vector<TrackingAllocator> allocs(2);
  std::vector<float> got;
  std::atomic<bool> all_sent{false};
  run_ranks(world, [&](int r) {
    Comm c(world.group({0, 1}), r, allocs[static_cast<std::size_t>(r)]);
    if (r == 0) {
      c.send(1, 2, std::vector<float>{2.0f, 2.5f});
      c.send(1, 1, std::vector<float>{1.0f, 1.5f});
      c.send(1, 1, std::vector<float>{3.0f, 3.5f});
      all_sent.store(true, std::memory_order_release);
    } else {
      while (!all_sent.load(std::memory_order_acquire)) std::this_thread::yield();
      std::vector<float> a(2), b(2), d(2);
      c.recv(0, 1, a);
      c.recv(0, 1, b);
      c.recv(0, 2, d);
      got = {a[0], a[1], b[0], b[1], d[0], d[1]};
      std::vector<float> wrong(3);
      CHECK_THROWS_AS(
          [&] {
            c.send(1, 9, std::vector<float>{1, 2});
            c.recv(1, 9, wrong);
          }(),
          Error);
    }
  });
  CHECK(got == std::vector<float>{1.0f, 1.5f, 3.0f, 3.5f, 2.0f, 2.5f});
  CHECK(allocs[0].stats().current_total == 0);
  CHECK(allocs[0].stats().peak[static_cast<std::size_t>(MemTag::CommBuffers)] == 3 * 2 * 4);
}

TEST_CASE("cpu/comm: a failing rank cancels the world instead of leaving the others waiting") {
  // Rank 2 throws before its all-reduce; ranks 0 and 1 are released with an
  // Error, and the first error (rank 0's or 2's) comes back.
  CommWorld world(3);
  std::vector<TrackingAllocator> allocs(3);
  std::vector<int> released(3, 0);
  CHECK_THROWS_AS(run_ranks(world,
                            [&](int r) {
                              if (r == 2) throw Error("rank 2 failed");
                              Comm c(world.group({0, 1, 2}), r, allocs[static_cast<std::size_t>(r)]);
                              std::vector<float> x(4, 1.0f);
                              try {
                                c.all_reduce(x);
                              } catch (const Error&) {
                                released[static_cast<std::size_t>(r)] = 1;
                                throw;
                              }
                            }),
                  Error);
  CHECK(released[0] == 1);
  CHECK(released[1] == 1);
  CHECK(world.cancelled());
}

TEST_CASE("cpu/comm: groups and handles refuse malformed members") {
  CommWorld world(4);
  TrackingAllocator a;
  CHECK_THROWS_AS(world.group({}), Error);
  CHECK_THROWS_AS(world.group({1, 0}), Error);
  CHECK_THROWS_AS(world.group({0, 4}), Error);
  CHECK(&world.group({0, 2}) == &world.group({0, 2}));
  CHECK_THROWS_AS(Comm(world.group({0, 2}), 1, a), Error);
}
