#include "sim/engine.hpp"

#include "sim/reference_engine.hpp"
#include "sim/trace.hpp"

#include <doctest/doctest.h>

#include <random>
#include <sstream>
#include <type_traits>
#include <thread>

namespace strata::sim {
namespace {

// prefix + i (spelled out: GCC 12 warns falsely on "lit" + std::to_string()).
std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

// Every engine-level case runs against the fast engine and the reference one.
template <class E>
RunResult run(const TaskGraph& g, CostFn cost = {}) {
  return E(g, std::move(cost)).run();
}

// 10e9 bytes/s is exactly 10 bytes per nanosecond.
constexpr double k10BytesPerNs = 10e9;

TEST_CASE_TEMPLATE("sim/engine: serial chain: makespan is the sum of durations", E, Engine, ReferenceEngine) {
  // 10 + 20 + 30 = 60; starts at 0, 10, 30.
  TaskGraph g;
  auto s = g.add_stream("r0.compute");
  auto a = g.add_task({.id = "a", .resources = {s}, .duration = 10});
  auto b = g.add_task({.id = "b", .resources = {s}, .duration = 20});
  auto c = g.add_task({.id = "c", .resources = {s}, .duration = 30});
  g.add_dep(a, b);
  g.add_dep(b, c);
  const RunResult r = run<E>(g);
  CHECK(r.makespan == 60);
  CHECK(r.at(a).start == 0);
  CHECK(r.at(b).start == 10);
  CHECK(r.at(c).start == 30);
  CHECK(r.at(c).end == 60);
  CHECK(r.at(s).busy == 60);
  CHECK(r.at(s).tasks == 3);
}

TEST_CASE_TEMPLATE("sim/engine: independent tasks on two streams overlap", E, Engine, ReferenceEngine) {
  // Both start at 0; makespan = max(10, 25) = 25; each stream busy for its task.
  TaskGraph g;
  auto s0 = g.add_stream("r0.compute");
  auto s1 = g.add_stream("r1.compute");
  auto a = g.add_task({.id = "a", .resources = {s0}, .duration = 10});
  auto b = g.add_task({.id = "b", .resources = {s1}, .duration = 25});
  const RunResult r = run<E>(g);
  CHECK(r.at(a).start == 0);
  CHECK(r.at(b).start == 0);
  CHECK(r.makespan == 25);
  CHECK(r.at(s0).busy == 10);
  CHECK(r.at(s1).busy == 25);
}

TEST_CASE_TEMPLATE("sim/engine: stream order holds even when a later task is ready first", E, Engine, ReferenceEngine) {
  // x: 0-50 on s1; a waits for x on s0: 50-60; b (no deps, enqueued after a): 60-65.
  TaskGraph g;
  auto s0 = g.add_stream("r0.compute");
  auto s1 = g.add_stream("r0.comm");
  auto x = g.add_task({.id = "x", .resources = {s1}, .duration = 50});
  auto a = g.add_task({.id = "a", .resources = {s0}, .duration = 10});
  auto b = g.add_task({.id = "b", .resources = {s0}, .duration = 5});
  g.add_dep(x, a);
  const RunResult r = run<E>(g);
  CHECK(r.at(a).start == 50);
  CHECK(r.at(b).start == 60);
  CHECK(r.at(b).end == 65);
  CHECK(r.makespan == 65);
}

TEST_CASE_TEMPLATE("sim/engine: a copy engine is a stream", E, Engine, ReferenceEngine) {
  // Two copies on one copy engine run back to back: 0-7, 7-14.
  TaskGraph g;
  auto ce = g.add_copy_engine("r0.h2d");
  auto a = g.add_task({.id = "a", .kind = TaskKind::Copy, .resources = {ce}, .duration = 7});
  auto b = g.add_task({.id = "b", .kind = TaskKind::Copy, .resources = {ce}, .duration = 7});
  const RunResult r = run<E>(g);
  CHECK(r.at(a).end == 7);
  CHECK(r.at(b).start == 7);
  CHECK(r.makespan == 14);
}

TEST_CASE_TEMPLATE("sim/engine: worker pool runs N tasks at once, first come first served", E, Engine, ReferenceEngine) {
  // 2 slots, three 10 ns tasks ready at 0: a, b run 0-10; c waits and runs 10-20.
  TaskGraph g;
  auto cpu = g.add_worker_pool("host.cpu", 2);
  auto a = g.add_task({.id = "a", .kind = TaskKind::Host, .resources = {cpu}, .duration = 10});
  auto b = g.add_task({.id = "b", .kind = TaskKind::Host, .resources = {cpu}, .duration = 10});
  auto c = g.add_task({.id = "c", .kind = TaskKind::Host, .resources = {cpu}, .duration = 10});
  const RunResult r = run<E>(g);
  CHECK(r.at(a).start == 0);
  CHECK(r.at(b).start == 0);
  CHECK(r.at(c).start == 10);
  CHECK(r.makespan == 20);
  CHECK(r.at(cpu).busy == 20);
}

TEST_CASE_TEMPLATE("sim/engine: diamond DAG: makespan is the critical path", E, Engine, ReferenceEngine) {
  // a(10) -> {b(20), c(50)} -> d(5): 10 + max(20, 50) + 5 = 65; d starts at 60.
  TaskGraph g;
  std::vector<ResourceId> s;
  for (int i = 0; i < 4; ++i) s.push_back(g.add_stream(numbered("r0.s", i)));
  auto a = g.add_task({.id = "a", .resources = {s[0]}, .duration = 10});
  auto b = g.add_task({.id = "b", .resources = {s[1]}, .duration = 20});
  auto c = g.add_task({.id = "c", .resources = {s[2]}, .duration = 50});
  auto d = g.add_task({.id = "d", .resources = {s[3]}, .duration = 5});
  g.add_dep(a, b);
  g.add_dep(a, c);
  g.add_dep(b, d);
  g.add_dep(c, d);
  const RunResult r = run<E>(g);
  CHECK(r.at(b).start == 10);
  CHECK(r.at(c).start == 10);
  CHECK(r.at(d).start == 60);
  CHECK(r.makespan == 65);
}

TEST_CASE_TEMPLATE("sim/engine: two transfers on one link share it equally", E, Engine, ReferenceEngine) {
  // 100 B each at 10 B/ns, both from t=0: 5 B/ns each, both end at 20.
  TaskGraph g;
  auto l = g.add_link("nvlink", k10BytesPerNs);
  auto a = g.add_task({.id = "a", .kind = TaskKind::P2PSend, .resources = {l}, .transfer_bytes = 100});
  auto b = g.add_task({.id = "b", .kind = TaskKind::P2PSend, .resources = {l}, .transfer_bytes = 100});
  const RunResult r = run<E>(g);
  CHECK(r.at(a).end == 20);
  CHECK(r.at(b).end == 20);
  CHECK(r.at(l).busy == 20);
  CHECK(r.at(l).bytes == 200);
}

TEST_CASE_TEMPLATE("sim/engine: a late joiner on a link is handled exactly", E, Engine, ReferenceEngine) {
  // a: 100 B at 10 B/ns from 0; b joins at 5 (after a 5 ns latency).
  // 0-5: a alone moves 50 B. 5-15: 5 B/ns each, a's last 50 B end at 15,
  // b has moved 50 B. 15-20: b alone moves its last 50 B at 10 B/ns.
  TaskGraph g;
  auto l = g.add_link("nic", k10BytesPerNs);
  auto a = g.add_task({.id = "a", .resources = {l}, .transfer_bytes = 100});
  auto b = g.add_task({.id = "b", .resources = {l}, .duration = 5, .transfer_bytes = 100});
  const RunResult r = run<E>(g);
  CHECK(r.at(a).end == 15);
  CHECK(r.at(b).start == 0);
  CHECK(r.at(b).end == 20);
  CHECK(r.makespan == 20);
  CHECK(r.at(l).busy == 20);
  if constexpr (std::is_same_v<E, Engine>)
    CHECK(r.stale_events == 2);  // a's completion at 10 and b's at 25 were rescheduled
}

TEST_CASE_TEMPLATE("sim/engine: max-min bottleneck over two links with a third flow", E, Engine, ReferenceEngine) {
  // Links A = 10 B/ns, B = 4 B/ns. f1 crosses A and B (40 B), f2 only A (120 B),
  // f3 only B (40 B). B's fair share is 2 < A's 5: f1 = f3 = 2 B/ns; f2 gets
  // A's remaining 8 B/ns. f2 ends at 120/8 = 15; f1 and f3 stay bottlenecked
  // on B and end at 40/2 = 20.
  TaskGraph g;
  auto la = g.add_link("A", 10e9);
  auto lb = g.add_link("B", 4e9);
  auto f1 = g.add_task({.id = "f1", .kind = TaskKind::Collective, .resources = {la, lb},
                        .transfer_bytes = 40});
  auto f2 = g.add_task({.id = "f2", .resources = {la}, .transfer_bytes = 120});
  auto f3 = g.add_task({.id = "f3", .resources = {lb}, .transfer_bytes = 40});
  const RunResult r = run<E>(g);
  CHECK(r.at(f2).end == 15);
  CHECK(r.at(f1).end == 20);
  CHECK(r.at(f3).end == 20);
}

TEST_CASE_TEMPLATE("sim/engine: a transfer's time is latency, then bytes, then latency_after", E, Engine, ReferenceEngine) {
  // 3 ns + 100 B / 10 B/ns + 2 ns = 15 ns; the stream is held throughout.
  TaskGraph g;
  auto s = g.add_stream("r0.comm");
  auto l = g.add_link("nvlink", k10BytesPerNs);
  auto t = g.add_task({.id = "t", .kind = TaskKind::P2PSend, .resources = {s, l}, .duration = 3,
                       .transfer_bytes = 100, .latency_after = 2});
  auto u = g.add_task({.id = "u", .resources = {s}, .duration = 1});
  const RunResult r = run<E>(g);
  CHECK(r.at(t).end == 15);
  CHECK(r.at(u).start == 15);
  CHECK(r.at(l).busy == 10);
  CHECK(r.at(s).busy == 16);
}

TEST_CASE_TEMPLATE("sim/engine: the cost function turns work into time", E, Engine, ReferenceEngine) {
  // 1 ns per 1000 FLOPs: 5e6 FLOPs -> 5000 ns; a fixed duration wins over work.
  TaskGraph g;
  auto s = g.add_stream("r0.compute");
  auto a = g.add_task({.id = "a", .resources = {s}, .flops = 5e6});
  auto b = g.add_task({.id = "b", .resources = {s}, .duration = 7, .flops = 5e6});
  const RunResult r = run<E>(g, [](const Task& t) { return static_cast<Time>(t.flops / 1000); });
  CHECK(r.at(a).end == 5000);
  CHECK(r.at(b).start == 5000);
  CHECK(r.makespan == 5007);
  CHECK_THROWS_AS(E{g}, GraphError);  // work but no cost function
}

// params 100 live from the start; a allocs act1 200; b allocs act2 300 and
// workspace 50 (freed at its own end); c allocs grads 40, frees act1 and act2.
struct MemoryPattern {
  TaskGraph g;
  PoolId pool;
  TaskId a, b, c;
  explicit MemoryPattern(Bytes capacity) {
    auto s = g.add_stream("r0.compute");
    pool = g.add_pool("r0", capacity);
    auto params = g.add_buffer({.id = "params", .pool = pool, .bytes = 100, .tag = MemTag::Params,
                                .live_at_start = true});
    auto act1 = g.add_buffer({.id = "act/L0", .pool = pool, .bytes = 200, .tag = MemTag::Activations});
    auto act2 = g.add_buffer({.id = "act/L1", .pool = pool, .bytes = 300, .tag = MemTag::Activations});
    auto ws = g.add_buffer({.id = "ws/L1", .pool = pool, .bytes = 50, .tag = MemTag::Workspace});
    auto grads = g.add_buffer({.id = "grads", .pool = pool, .bytes = 40, .tag = MemTag::Grads});
    (void)params;
    a = g.add_task({.id = "a", .resources = {s}, .duration = 10, .allocs = {act1}});
    b = g.add_task({.id = "b", .resources = {s}, .duration = 20, .allocs = {act2, ws}, .frees = {ws}});
    c = g.add_task({.id = "c", .resources = {s}, .duration = 5, .allocs = {grads},
                    .frees = {act1, act2}});
  }
};

TEST_CASE_TEMPLATE("sim/engine: memory peak, its time and tag breakdown follow alloc-at-start, free-at-end", E, Engine, ReferenceEngine) {
  // t=0: 100+200 = 300; t=10: +300+50 = 650 (peak); t=30: -50 +40 = 640;
  // t=35: -500 = 140. Peak breakdown: params 100, activations 500, workspace 50.
  MemoryPattern m(1000);
  const RunResult r = run<E>(m.g);
  const PoolUsage& u = r.at(m.pool);
  CHECK(u.peak == 650);
  CHECK(u.peak_time == 10);
  CHECK(u.peak_by_tag[static_cast<int>(MemTag::Params)] == 100);
  CHECK(u.peak_by_tag[static_cast<int>(MemTag::Activations)] == 500);
  CHECK(u.peak_by_tag[static_cast<int>(MemTag::Workspace)] == 50);
  CHECK(u.peak_by_tag[static_cast<int>(MemTag::Grads)] == 0);
  CHECK(u.end_live == 140);
  CHECK(u.bytes_short == 0);
  CHECK(r.fits());
  REQUIRE(u.timeline.size() == 4);
  CHECK(u.timeline[0].time == 0);
  CHECK(u.timeline[0].live == 300);
  CHECK(u.timeline[1].live == 650);
  CHECK(u.timeline[2].time == 30);
  CHECK(u.timeline[2].live == 640);
  CHECK(u.timeline[3].live == 140);
}

TEST_CASE_TEMPLATE("sim/engine: out of memory is a result: first OOM named, run continues, true peak kept", E, Engine, ReferenceEngine) {
  // Capacity 600: b's workspace takes live bytes to 650 at t=10, 50 short.
  MemoryPattern m(600);
  const RunResult r = run<E>(m.g);
  REQUIRE(r.oom);
  CHECK(!r.fits());
  CHECK(*r.oom->task == m.b);
  CHECK(m.g.at(*r.oom->buffer).id == "ws/L1");
  CHECK(r.oom->pool == m.pool);
  CHECK(r.oom->time == 10);
  CHECK(r.oom->needed == 650);
  CHECK(r.oom->bytes_short == 50);
  CHECK(r.at(m.pool).peak == 650);
  CHECK(r.at(m.pool).bytes_short == 50);
  CHECK(r.makespan == 35);
}

TEST_CASE_TEMPLATE("sim/engine: buffers live at start that do not fit are reported without a task", E, Engine, ReferenceEngine) {
  // 100 resident bytes in a 60-byte pool: 40 short at t=0.
  TaskGraph g;
  auto p = g.add_pool("r0", 60);
  g.add_buffer({.id = "params", .pool = p, .bytes = 100, .tag = MemTag::Params, .live_at_start = true});
  const RunResult r = run<E>(g);
  REQUIRE(r.oom);
  CHECK(!r.oom->task);
  CHECK(r.oom->bytes_short == 40);
}

TEST_CASE_TEMPLATE("sim/engine: freeing a buffer before its allocation is a graph error", E, Engine, ReferenceEngine) {
  // b frees act at t=0 but a (which allocates it) runs on another stream only after x.
  TaskGraph g;
  auto s0 = g.add_stream("r0.a");
  auto s1 = g.add_stream("r0.b");
  auto p = g.add_pool("r0", 1000);
  auto act = g.add_buffer({.id = "act", .pool = p, .bytes = 10});
  g.add_task({.id = "x", .resources = {s0}, .duration = 50});
  g.add_task({.id = "a", .resources = {s0}, .duration = 10, .allocs = {act}});
  g.add_task({.id = "b", .resources = {s1}, .duration = 1, .frees = {act}});
  CHECK_THROWS_WITH_AS(run<E>(g), doctest::Contains("frees buffer 'act'"), GraphError);
}

TEST_CASE_TEMPLATE("sim/engine: freeing a buffer nobody allocates is rejected before the run", E,
                   Engine, ReferenceEngine) {
  // 'ghost' is neither allocated by a task nor live at start.
  TaskGraph g;
  auto p = g.add_pool("r0", 1000);
  auto ghost = g.add_buffer({.id = "ghost", .pool = p, .bytes = 10});
  g.add_task({.id = "t", .frees = {ghost}});
  CHECK_THROWS_WITH_AS(E{g}, "task 't' frees buffer 'ghost', which no task allocates and "
                                  "which is not live at start", GraphError);
}

TEST_CASE_TEMPLATE("sim/engine: at one instant frees come before allocations", E, Engine,
                   ReferenceEngine) {
  // a (s0, 0-10) holds 100 B and frees it at 10; b (s1) starts at 10, after x,
  // and allocates 100 B. Capacity 150: the peak stays 100 and nothing overflows,
  // whichever end the engine handles first.
  TaskGraph g;
  auto s0 = g.add_stream("r0.a");
  auto s1 = g.add_stream("r0.b");
  auto p = g.add_pool("r0", 150);
  auto ba = g.add_buffer({.id = "a", .pool = p, .bytes = 100});
  auto bb = g.add_buffer({.id = "b", .pool = p, .bytes = 100});
  g.add_task({.id = "x", .resources = {s1}, .duration = 10});
  g.add_task({.id = "a", .resources = {s0}, .duration = 10, .allocs = {ba}, .frees = {ba}});
  auto b = g.add_task({.id = "b", .resources = {s1}, .duration = 10, .allocs = {bb}});
  const RunResult r = run<E>(g);
  CHECK(r.at(b).start == 10);
  CHECK(r.at(p).peak == 100);
  CHECK(r.fits());
}

TEST_CASE_TEMPLATE("sim/engine: tasks ready at one instant start in task order", E, Engine,
                   ReferenceEngine) {
  // One-slot pool. y (task 2) and x (task 1) both become ready at 10, y's
  // predecessor ending first in event order; x, added first, runs 10-15, y 15-20.
  TaskGraph g;
  auto s0 = g.add_stream("r0.s0");
  auto cpu = g.add_worker_pool("host.cpu", 1);
  auto p = g.add_task({.id = "p", .resources = {s0}, .duration = 10});
  auto x = g.add_task({.id = "x", .kind = TaskKind::Host, .resources = {cpu}, .duration = 5});
  auto y = g.add_task({.id = "y", .kind = TaskKind::Host, .resources = {cpu}, .duration = 5});
  auto q = g.add_task({.id = "q", .duration = 10});
  g.add_dep(q, y);
  g.add_dep(p, x);
  const RunResult r = run<E>(g);
  CHECK(r.at(x).start == 10);
  CHECK(r.at(y).start == 15);
  CHECK(r.makespan == 20);
}

TaskGraph random_graph(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  TaskGraph g;
  std::vector<ResourceId> streams, links;
  for (int i = 0; i < 4; ++i) streams.push_back(g.add_stream(numbered("r", i).append(".s")));
  for (int i = 0; i < 3; ++i) links.push_back(g.add_link(numbered("l", i), (i + 1) * 3e9));
  auto pool = g.add_pool("r0", 1 << 20);
  std::vector<BufferId> open;
  for (int i = 0; i < n; ++i) {
    Task t;
    t.id = numbered("t", i);
    t.resources = {streams[rng() % streams.size()]};
    t.duration = static_cast<Time>(rng() % 50);
    if (rng() % 3 == 0) {
      const std::size_t first = rng() % links.size();
      t.resources.push_back(links[first]);
      if (rng() % 2) t.resources.push_back(links[(first + 1) % links.size()]);
      t.transfer_bytes = 1 + rng() % 1000;
    }
    auto b = g.add_buffer({.id = numbered("b", i), .pool = pool, .bytes = static_cast<Bytes>(1 + rng() % 100),
                           .tag = static_cast<MemTag>(rng() % kMemTagCount)});
    t.allocs = {b};
    auto id = g.add_task(std::move(t));
    for (int k = 0; k < 2 && i > 0; ++k) g.add_dep(TaskId{static_cast<int>(rng() % i)}, id);
    (void)open;
  }
  return g;
}

TEST_CASE("sim/engine: runs are deterministic, also across threads, down to the trace bytes") {
  // The same graph gives identical timings on repeated runs and on two threads at once,
  // and byte-identical trace and summary.
  const TaskGraph g = random_graph(7, 400);
  Engine e(g);
  const RunResult r1 = e.run();
  const RunResult r2 = e.run();
  RunResult t1, t2;
  std::thread a([&] { t1 = simulate(g); });
  std::thread b([&] { t2 = simulate(g); });
  a.join();
  b.join();
  for (std::size_t i = 0; i < g.num_tasks(); ++i) {
    CHECK(r1.tasks[i].start == r2.tasks[i].start);
    CHECK(r1.tasks[i].end == t1.tasks[i].end);
    CHECK(r1.tasks[i].end == t2.tasks[i].end);
  }
  CHECK(r1.makespan == t2.makespan);
  CHECK(r1.pools[0].peak == t1.pools[0].peak);
  // And the exported bytes: a separately built copy of the graph, run on
  // another thread, gives the identical trace and summary.
  const TaskGraph g2 = random_graph(7, 400);
  CHECK(chrome_trace(g, r1) == chrome_trace(g2, t2));
  std::ostringstream s1, s2;
  write_summary(s1, g, r1);
  write_summary(s2, g2, t1);
  CHECK(s1.str() == s2.str());
}

TEST_CASE_TEMPLATE("sim/engine: replace_time replays other task times over the same schedule", E, Engine, ReferenceEngine) {
  // a (10) then b (20) on one stream, c (5 latency + 100 bytes at 10 B/ns
  // = 15) on a link after a: makespan 30. Replaced by 40, 5 and 7 (c moves
  // no bytes any more): b ends at 45, c at 47, so 47.
  TaskGraph g;
  auto s = g.add_stream("r0.compute");
  auto link = g.add_link("nic", k10BytesPerNs);
  auto q = g.add_stream("r0.comm");
  auto a = g.add_task({.id = "a", .resources = {s}, .duration = 10});
  auto b = g.add_task({.id = "b", .resources = {s}, .duration = 20});
  auto c = g.add_task({.id = "c", .resources = {q, link}, .duration = 5, .transfer_bytes = 100});
  g.add_dep(a, c);
  CHECK(run<E>(g).makespan == 30);
  TaskGraph h = g;
  h.replace_time(a, 40);
  h.replace_time(b, 5);
  h.replace_time(c, 7);
  const RunResult r = run<E>(h);
  CHECK(r.makespan == 47);
  CHECK(r.at(c).start == 40);
  CHECK(run<E>(g).makespan == 30);  // the original is untouched
  CHECK_THROWS_AS(h.replace_time(a, -1), GraphError);
  CHECK_THROWS_AS(h.replace_time(TaskId{7}, 1), GraphError);
}

TEST_CASE("sim/engine: every task runs after its dependencies and streams never overlap") {
  // Invariants on a random graph: start(b) >= end(a) for every edge; tasks on
  // one stream do not overlap; total stream busy equals the sum of its tasks.
  const TaskGraph g = random_graph(11, 500);
  const RunResult r = simulate(g);
  g.for_each_edge([&](TaskId a, TaskId b, EdgeKind) { CHECK(r.at(b).start >= r.at(a).end); });
  for (std::size_t t = 0; t < g.num_tasks(); ++t) CHECK(r.tasks[t].end >= r.tasks[t].start);
}

TaskGraph mixed_graph(std::uint32_t seed, int n) {
  // Streams, a copy engine, a 2-slot worker pool, three links, one pool with
  // buffers freed by later tasks; zero and non-zero times, tail latencies.
  std::mt19937 rng(seed);
  TaskGraph g;
  std::vector<ResourceId> queues{g.add_stream("r0.compute"), g.add_stream("r0.comm"),
                                 g.add_copy_engine("r0.h2d"), g.add_worker_pool("host.cpu", 2)};
  std::vector<ResourceId> links{g.add_link("nvlink", 7e9), g.add_link("pcie", 3e9),
                                g.add_link("nic", 5e9)};
  auto pool = g.add_pool("r0", 4000);
  std::vector<std::pair<TaskId, BufferId>> live;
  for (int i = 0; i < n; ++i) {
    Task t;
    t.id = numbered("t", i);
    if (rng() % 8 != 0) t.resources.push_back(queues[rng() % queues.size()]);
    t.duration = static_cast<Time>(rng() % 4 == 0 ? 0 : rng() % 40);
    if (rng() % 3 == 0) {
      const std::size_t first = rng() % links.size();
      t.resources.push_back(links[first]);
      if (rng() % 3 == 0) t.resources.push_back(links[(first + 1) % links.size()]);
      t.transfer_bytes = static_cast<Bytes>(rng() % 5 == 0 ? 0 : 1 + rng() % 500);
      t.latency_after = static_cast<Time>(rng() % 3 == 0 ? rng() % 10 : 0);
    }
    auto buf = g.add_buffer({.id = numbered("b", i), .pool = pool,
                             .bytes = static_cast<Bytes>(1 + rng() % 300),
                             .tag = static_cast<MemTag>(rng() % kMemTagCount)});
    t.allocs = {buf};
    // Free a buffer allocated by a task this one depends on.
    std::optional<TaskId> owner;
    if (!live.empty() && rng() % 2 == 0) {
      const std::size_t k = rng() % live.size();
      owner = live[k].first;
      t.frees = {live[k].second};
      live.erase(live.begin() + static_cast<long>(k));
    }
    const TaskId id = g.add_task(std::move(t));
    live.emplace_back(id, buf);
    if (owner) g.add_dep(*owner, id);
    for (int k = 0; k < 2 && i > 0; ++k)
      if (rng() % 2) g.add_dep(TaskId{static_cast<int>(rng() % static_cast<std::uint32_t>(i))}, id);
  }
  return g;
}

TEST_CASE("sim/engine: the fast and the reference engine agree bit for bit") {
  // On random graphs mixing every resource kind, shared links and buffers,
  // both engines give the same start/end of every task, busy time and bytes of
  // every resource, memory timeline, peak, breakdown and first OOM.
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    const TaskGraph g = mixed_graph(seed, 150);
    const RunResult a = Engine(g).run();
    const RunResult b = ReferenceEngine(g).run();
    REQUIRE(a.tasks.size() == b.tasks.size());
    for (std::size_t t = 0; t < a.tasks.size(); ++t) {
      CAPTURE(t);
      CHECK(a.tasks[t].start == b.tasks[t].start);
      CHECK(a.tasks[t].end == b.tasks[t].end);
    }
    CHECK(a.makespan == b.makespan);
    for (std::size_t i = 0; i < a.resources.size(); ++i) {
      CHECK(a.resources[i].busy == b.resources[i].busy);
      CHECK(a.resources[i].tasks == b.resources[i].tasks);
      CHECK(a.resources[i].bytes == b.resources[i].bytes);
    }
    const PoolUsage &pa = a.pools[0], &pb = b.pools[0];
    CHECK(pa.peak == pb.peak);
    CHECK(pa.peak_time == pb.peak_time);
    CHECK(pa.peak_by_tag == pb.peak_by_tag);
    CHECK(pa.end_live == pb.end_live);
    REQUIRE(pa.timeline.size() == pb.timeline.size());
    for (std::size_t k = 0; k < pa.timeline.size(); ++k) {
      CHECK(pa.timeline[k].time == pb.timeline[k].time);
      CHECK(pa.timeline[k].live == pb.timeline[k].live);
    }
    const auto ta = tag_timeline(g, PoolId{0}, pa), tb = tag_timeline(g, PoolId{0}, pb);
    REQUIRE(ta.size() == tb.size());
    for (std::size_t k = 0; k < ta.size(); ++k) CHECK(ta[k].by_tag == tb[k].by_tag);
    REQUIRE(a.oom.has_value() == b.oom.has_value());
    if (a.oom) {
      CHECK(a.oom->task == b.oom->task);
      CHECK(a.oom->buffer == b.oom->buffer);
      CHECK(a.oom->bytes_short == b.oom->bytes_short);
    }
  }
}

TEST_CASE("sim/engine: long chains of zero-time tasks do not recurse") {
  // 200,000 zero-duration tasks in a dependency chain (no stream) plus one
  // 200,000-task stream: makespan 0 and 200,000 ns, no stack overflow.
  TaskGraph g;
  auto s = g.add_stream("r0.s");
  TaskId prev{};
  for (int i = 0; i < 200'000; ++i) {
    const TaskId t = g.add_task({.id = numbered("z", i), .duration = 0});
    if (i > 0) g.add_dep(prev, t);
    prev = t;
  }
  CHECK(simulate(g).makespan == 0);
  for (int i = 0; i < 200'000; ++i) g.add_task({.id = numbered("s", i), .resources = {s}, .duration = 1});
  CHECK(simulate(g).makespan == 200'000);
}

}  // namespace
}  // namespace strata::sim
