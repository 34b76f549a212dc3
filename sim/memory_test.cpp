#include "sim/memory.hpp"

#include <doctest/doctest.h>

namespace strata::sim {
namespace {

TEST_CASE("sim/memory: tracker: same-time changes coalesce into one timeline point") {
  // Alloc 10 and 20 at t=5 give one point (5, 30); free 10 at t=7 gives (7, 20).
  TaskGraph g;
  auto p = g.add_pool("gpu0", 100);
  auto a = g.add_buffer({.id = "a", .pool = p, .bytes = 10, .tag = MemTag::Activations});
  auto b = g.add_buffer({.id = "b", .pool = p, .bytes = 20, .tag = MemTag::CommBuffers});
  auto t = g.add_task({.id = "t"});
  MemoryTracker m(g);
  m.reset();
  m.alloc(a, t, 5);
  m.alloc(b, t, 5);
  m.free(a, t, 7);
  const auto& u = m.pools()[0];
  REQUIRE(u.timeline.size() == 3);
  CHECK(u.timeline[1].time == 5);
  CHECK(u.timeline[1].live == 30);
  CHECK(u.timeline[2].live == 20);
  const auto tags = tag_timeline(g, p, u);
  REQUIRE(tags.size() == 3);
  CHECK(tags[1].by_tag[static_cast<int>(MemTag::Activations)] == 10);
  CHECK(tags[2].by_tag[static_cast<int>(MemTag::Activations)] == 0);
  CHECK(tags[2].by_tag[static_cast<int>(MemTag::CommBuffers)] == 20);
  CHECK(u.changes.size() == 3);
  CHECK(u.peak == 30);
  CHECK(u.peak_time == 5);
  CHECK_THROWS_AS(m.free(a, t, 8), GraphError);
}

TEST_CASE("sim/memory: tracker: pools are independent and the first OOM is kept") {
  // gpu0 (cap 10) overflows by 5 at t=1, gpu1 (cap 10) by 15 at t=2: first OOM is gpu0's.
  TaskGraph g;
  auto p0 = g.add_pool("gpu0", 10);
  auto p1 = g.add_pool("gpu1", 10);
  auto a = g.add_buffer({.id = "a", .pool = p0, .bytes = 15});
  auto b = g.add_buffer({.id = "b", .pool = p1, .bytes = 25});
  auto t = g.add_task({.id = "t"});
  MemoryTracker m(g);
  m.reset();
  m.alloc(a, t, 1);
  m.alloc(b, t, 2);
  REQUIRE(m.oom());
  CHECK(m.oom()->pool == p0);
  CHECK(m.oom()->bytes_short == 5);
  CHECK(m.pools()[1].bytes_short == 15);
}

}  // namespace
}  // namespace strata::sim
