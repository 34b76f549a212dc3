#include "sim/caching_allocator.hpp"

#include <doctest/doctest.h>

#include "sim/engine.hpp"

namespace strata::sim {
namespace {

constexpr Bytes MiB = Bytes{1} << 20;

TEST_CASE("sim/allocator: sizes round and segments are sized as CUDACachingAllocator.cpp does") {
  // round_size: multiples of 512 B, at least 512.
  CHECK(allocator_round(1) == 512);
  CHECK(allocator_round(512) == 512);
  CHECK(allocator_round(513) == 1024);
  // get_allocation_size: 2 MiB up to 1 MiB, 20 MiB below 10 MiB, else a
  // multiple of 2 MiB.
  CHECK(allocator_segment(MiB) == 2 * MiB);
  CHECK(allocator_segment(MiB + 512) == 20 * MiB);
  CHECK(allocator_segment(10 * MiB - 512) == 20 * MiB);
  CHECK(allocator_segment(10 * MiB) == 10 * MiB);
  CHECK(allocator_segment(10 * MiB + 512) == 12 * MiB);
}

TEST_CASE("sim/allocator: small requests share a 2 MiB segment") {
  // Four 512 KiB tensors fill one 2 MiB segment; the fifth needs another.
  CachingAllocator a({});
  for (int i = 0; i < 4; ++i) a.malloc(i, 512 * 1024);
  CHECK(a.reserved() == 2 * MiB);
  a.malloc(4, 512 * 1024);
  CHECK(a.reserved() == 4 * MiB);
  CHECK(a.allocated() == 5 * 512 * 1024);
  CHECK(a.segments_made() == 2);
}

TEST_CASE("sim/allocator: a large block is split only when more than 1 MiB is left") {
  // A freed 12 MiB segment serves 11 MiB whole (1 MiB left is not split
  // off), so a second 11 MiB tensor needs its own segment.
  CachingAllocator a({});
  a.malloc(0, 12 * MiB);
  a.free(0);
  a.malloc(1, 11 * MiB);
  a.malloc(2, 11 * MiB);
  CHECK(a.reserved() == 24 * MiB);
  // 10 MiB leaves 2 MiB, which is split off and serves a 2 MiB request.
  CachingAllocator b({});
  b.malloc(0, 12 * MiB);
  b.free(0);
  b.malloc(1, 10 * MiB);
  b.malloc(2, 2 * MiB);
  CHECK(b.reserved() == 12 * MiB);
}

TEST_CASE("sim/allocator: fragmentation, best fit and merging") {
  // 100 + 100 MiB, the first freed, then 150 MiB: no cached block holds it,
  // so a third segment: 350 MiB reserved for 250 allocated.
  CachingAllocator a({});
  a.malloc(0, 100 * MiB);
  a.malloc(1, 100 * MiB);
  a.free(0);
  a.malloc(2, 150 * MiB);
  CHECK(a.reserved() == 350 * MiB);
  CHECK(a.allocated() == 250 * MiB);
  CHECK(a.reserved_peak() == 350 * MiB);
  CHECK(a.allocated_peak() == 250 * MiB);
  // Best fit: free 30 and 50 MiB segments; 25 MiB takes the 30 one, so a
  // later 45 MiB still fits the 50 without a new segment.
  CachingAllocator b({});
  b.malloc(0, 50 * MiB);
  b.malloc(1, 30 * MiB);
  b.free(0);
  b.free(1);
  b.malloc(2, 25 * MiB);
  b.malloc(3, 45 * MiB);
  CHECK(b.reserved() == 80 * MiB);
  CHECK(b.segments_made() == 2);
  // Merging: two 40 MiB pieces of a 100 MiB segment, freed, merge with the
  // 20 MiB rest into one block that serves 100 MiB again.
  CachingAllocator c({});
  c.malloc(0, 100 * MiB);
  c.free(0);
  c.malloc(1, 40 * MiB);
  c.malloc(2, 40 * MiB);
  c.free(1);
  c.free(2);
  c.malloc(3, 100 * MiB);
  CHECK(c.reserved() == 100 * MiB);
  CHECK_THROWS(c.free(1));
  CHECK_THROWS(c.malloc(3, MiB));
}

TEST_CASE("sim/allocator: at the limit, cached segments are released before a new one") {
  // Limit 100 MiB: a freed 60 MiB segment is released so that 70 MiB fits.
  CachingAllocator a({.limit = 100 * MiB});
  a.malloc(0, 60 * MiB);
  a.free(0);
  a.malloc(1, 70 * MiB);
  CHECK(a.reserved() == 70 * MiB);
  CHECK(a.reserved_peak() == 70 * MiB);
  CHECK(a.releases() == 1);
  CHECK(a.overflow() == 0);
  // With the 60 MiB still in use nothing can be released: 30 MiB over.
  CachingAllocator b({.limit = 100 * MiB});
  b.malloc(0, 60 * MiB);
  b.malloc(1, 70 * MiB);
  CHECK(b.overflow() == 30 * MiB);
  CHECK(b.reserved() == 130 * MiB);
}

TEST_CASE("sim/allocator: expandable segments extend a free end instead of a new segment") {
  // 100 MiB freed, then 150 MiB: natively a second segment (250 MiB); with
  // expandable segments the free 100 MiB at the end grows by 60 MiB (three
  // 20 MiB pages): 160 MiB.
  CachingAllocator native({});
  native.malloc(0, 100 * MiB);
  native.free(0);
  native.malloc(1, 150 * MiB);
  CHECK(native.reserved() == 250 * MiB);
  CachingAllocator ex({.mode = AllocatorMode::ExpandableSegments});
  ex.malloc(0, 100 * MiB);
  ex.free(0);
  ex.malloc(1, 150 * MiB);
  CHECK(ex.reserved() == 160 * MiB);
  // Pages: 30 MiB maps two 20 MiB pages; the 10 MiB left is split off
  // (expandable blocks split at 512 B) and serves a 10 MiB request.
  CachingAllocator p({.mode = AllocatorMode::ExpandableSegments});
  p.malloc(0, 30 * MiB);
  CHECK(p.reserved() == 40 * MiB);
  p.malloc(1, 10 * MiB);
  CHECK(p.reserved() == 40 * MiB);
  // Small requests map 2 MiB pages of their own segment.
  p.malloc(2, 4096);
  CHECK(p.reserved() == 42 * MiB);
  // With the mapped end in use, new pages start a block after it (20 MiB
  // more), which is then the end: with the 10 MiB before it freed, 25 MiB
  // fits nowhere and the end is in use, so two more pages (102 MiB); the
  // 20 MiB block freed merges with the 10 MiB into 30 MiB, which serves
  // 30 MiB without growing.
  p.malloc(3, 20 * MiB);
  CHECK(p.reserved() == 62 * MiB);
  p.free(1);
  p.malloc(4, 25 * MiB);
  CHECK(p.reserved() == 102 * MiB);
  p.free(3);
  p.malloc(5, 30 * MiB);
  CHECK(p.reserved() == 102 * MiB);
}

TEST_CASE("sim/allocator: a freed block serves only its own stream") {
  // 100 MiB freed on stream 1 is cached for stream 1: the same size on
  // stream 2 needs a segment of its own (200 MiB reserved), and stream 1's
  // next 100 MiB reuses its block. Expandable segments: one per stream.
  CachingAllocator a({});
  a.malloc(0, 100 * MiB, 1);
  a.free(0);
  a.malloc(1, 100 * MiB, 2);
  CHECK(a.reserved() == 200 * MiB);
  a.malloc(2, 100 * MiB, 1);
  CHECK(a.reserved() == 200 * MiB);
  CachingAllocator e({.mode = AllocatorMode::ExpandableSegments});
  e.malloc(0, 100 * MiB, 1);
  e.free(0);
  e.malloc(1, 100 * MiB, 2);
  CHECK(e.reserved() == 200 * MiB);
  e.free(1);
  e.malloc(2, 160 * MiB, 2);  // grows stream 2's free end by 60 MiB
  CHECK(e.reserved() == 260 * MiB);
}

TEST_CASE("sim/allocator: a run's pool replayed, steps repeated to the steady state") {
  // Static 100 MiB (live at start); t1 allocates X 30 MiB; t2 allocates
  // Y 40 MiB and frees X at its end; t3 frees Y. A runtime buffer is not a
  // request. Step 1: segments 100, 30, 40 = 170 MiB; step 2 reuses the
  // cached 30 and 40 MiB blocks: 170 MiB, steady after two steps.
  TaskGraph g;
  const PoolId p = g.add_pool("gpu", 1000 * MiB);
  const auto r = g.add_stream("s");
  g.add_buffer({.id = "w", .pool = p, .bytes = 100 * MiB, .tag = MemTag::Params, .live_at_start = true});
  g.add_buffer({.id = "ctx", .pool = p, .bytes = 500 * MiB, .tag = MemTag::Runtime, .live_at_start = true});
  const BufferId x = g.add_buffer({.id = "x", .pool = p, .bytes = 30 * MiB});
  const BufferId y = g.add_buffer({.id = "y", .pool = p, .bytes = 40 * MiB});
  const TaskId t1 = g.add_task({.id = "t1", .resources = {r}, .duration = 10, .allocs = {x}});
  const TaskId t2 = g.add_task({.id = "t2", .resources = {r}, .duration = 10, .allocs = {y}, .frees = {x}}, {t1});
  g.add_task({.id = "t3", .resources = {r}, .duration = 10, .frees = {y}}, {t2});
  const RunResult run = simulate(g);
  const AllocatorReplay rep = replay_allocator(g, p, run.at(p), {});
  CHECK(rep.reserved_peak == 170 * MiB);
  CHECK(rep.allocated_peak == 170 * MiB);
  CHECK(rep.steps == 2);
  CHECK(rep.segments_made == 3);
  // Expandable: the static 100 MiB in the start's segment; x and y are
  // allocated by tasks on stream s, in its own: 40 MiB for x (two pages,
  // 10 free), y's 40 extends the free 10 MiB end by two pages: 180 MiB.
  const AllocatorReplay ex = replay_allocator(g, p, run.at(p), {.mode = AllocatorMode::ExpandableSegments});
  CHECK(ex.reserved_peak == 180 * MiB);
}

}  // namespace
}  // namespace strata::sim
