#include "sim/task_graph.hpp"

#include <doctest/doctest.h>

#include "sim/engine.hpp"

namespace strata::sim {
namespace {

TEST_CASE("sim/task_graph: handles are dense indices in insertion order and names resolve") {
  // Two streams get ids 0 and 1, a link id 2; tasks 0, 1; lookups by name agree.
  TaskGraph g;
  auto s0 = g.add_stream("r0.compute");
  auto s1 = g.add_copy_engine("r0.h2d");
  auto l = g.add_link("nvlink", 450 * kGB);
  CHECK(s0.index == 0);
  CHECK(s1.index == 1);
  CHECK(l.index == 2);
  CHECK(g.resource("nvlink") == l);
  CHECK(g.at(l).bytes_per_second == 450e9);
  auto a = g.add_task({.id = "r0:fwd/L0/mb0", .resources = {s0}, .duration = 1,
                       .label = {.rank = 0, .microbatch = 0, .layer = 0, .phase = Phase::Fwd}});
  auto b = g.add_task({.id = "r0:bwd/L0/mb0", .resources = {s0}, .duration = 1});
  CHECK(a.index == 0);
  CHECK(b.index == 1);
  CHECK(g.task("r0:bwd/L0/mb0") == b);
  CHECK(g.at(a).label.phase == Phase::Fwd);
}

TEST_CASE("sim/task_graph: stream order adds an edge between consecutive tasks on a stream") {
  // Three tasks on one stream and one on another: 2 stream-order edges + 1 dependency.
  TaskGraph g;
  auto s = g.add_stream("s");
  auto o = g.add_stream("o");
  auto a = g.add_task({.id = "a", .resources = {s}});
  g.add_task({.id = "x", .resources = {o}});
  g.add_task({.id = "b", .resources = {s}});
  auto c = g.add_task({.id = "c", .resources = {s}});
  g.add_dep(a, c);
  CHECK(g.num_edges() == 3);
  int order = 0, deps = 0;
  g.for_each_edge([&](TaskId, TaskId, EdgeKind k) { (k == EdgeKind::StreamOrder ? order : deps)++; });
  CHECK(order == 2);
  CHECK(deps == 1);
}

TEST_CASE("sim/task_graph: cycles are rejected with the tasks on the cycle named") {
  // a -> b -> c -> a is reported in that order.
  TaskGraph g;
  auto a = g.add_task({.id = "a"});
  auto b = g.add_task({.id = "b"});
  auto c = g.add_task({.id = "c"});
  auto d = g.add_task({.id = "d"});
  g.add_dep(d, a);
  g.add_dep(a, b);
  g.add_dep(b, c);
  g.add_dep(c, a);
  CHECK_THROWS_WITH_AS(g.check_acyclic(), "dependency cycle: 'a' -> 'b' -> 'c' -> 'a'", GraphError);
  CHECK_THROWS_AS(Engine{g}, GraphError);
}

TEST_CASE("sim/task_graph: a dependency against stream order is a cycle") {
  // a then b on one stream; b -> a would deadlock: 'a' -(stream order)-> 'b' -> 'a'.
  TaskGraph g;
  auto s = g.add_stream("s");
  auto a = g.add_task({.id = "a", .resources = {s}});
  auto b = g.add_task({.id = "b", .resources = {s}});
  g.add_dep(b, a);
  CHECK_THROWS_WITH_AS(g.check_acyclic(), "dependency cycle: 'a' -(stream order)-> 'b' -> 'a'",
                       GraphError);
}

TEST_CASE("sim/task_graph: a self dependency is a cycle") {
  // 'a' -> 'a'.
  TaskGraph g;
  auto a = g.add_task({.id = "a"});
  g.add_dep(a, a);
  CHECK_THROWS_WITH_AS(g.check_acyclic(), "dependency cycle: 'a' -> 'a'", GraphError);
}

TEST_CASE("sim/task_graph: unknown resources, pools, buffers and tasks are errors") {
  // Handles out of range and names never added are rejected with the name or index.
  TaskGraph g;
  auto s = g.add_stream("s");
  auto p = g.add_pool("gpu0", 100);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "t", .resources = {ResourceId{7}}}),
                       "task 't': unknown resource #7 (graph has 1 resources)", GraphError);
  CHECK_THROWS_WITH_AS(g.resource("nvlink"), "unknown resource 'nvlink'", GraphError);
  CHECK_THROWS_WITH_AS(g.pool("gpu9"), "unknown pool 'gpu9'", GraphError);
  CHECK_THROWS_WITH_AS(g.add_buffer({.id = "x", .pool = PoolId{3}, .bytes = 1}),
                       "buffer 'x': unknown pool #3 (graph has 1 pools)", GraphError);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "t", .allocs = {BufferId{0}}}),
                       "task 't': unknown buffer #0 (graph has 0 buffers)", GraphError);
  CHECK_THROWS_WITH_AS(g.add_dep("a", "a"), "unknown task 'a'", GraphError);
  CHECK_THROWS_AS(g.add_dep(TaskId{0}, TaskId{1}), GraphError);
  (void)s;
  (void)p;
}

TEST_CASE("sim/task_graph: malformed tasks are rejected") {
  // Duplicate ids and names, two streams, bytes without a link, negative time,
  // a buffer allocated or freed twice.
  TaskGraph g;
  auto s = g.add_stream("s");
  auto s2 = g.add_stream("s2");
  auto l = g.add_link("l", 1e9);
  auto p = g.add_pool("gpu0", 100);
  auto b = g.add_buffer({.id = "b", .pool = p, .bytes = 1});
  CHECK_THROWS_AS(g.add_stream("s"), GraphError);
  CHECK_THROWS_AS(g.add_link("l2", 0), GraphError);
  CHECK_THROWS_AS(g.add_worker_pool("w", 0), GraphError);
  CHECK_THROWS_AS(g.add_buffer({.id = "b", .pool = p}), GraphError);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "t", .resources = {s, s2}}),
                       doctest::Contains("uses two queue resources"), GraphError);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "t", .resources = {s}, .transfer_bytes = 5}),
                       doctest::Contains("no link"), GraphError);
  CHECK_THROWS_AS(g.add_task({.id = "t", .duration = -1}), GraphError);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "t", .resources = {l, l}}),
                       "task 't': uses resource 'l' twice", GraphError);
  g.add_task({.id = "t", .resources = {s, l}, .allocs = {b}});
  CHECK_THROWS_AS(g.add_task({.id = "t"}), GraphError);
  CHECK_THROWS_WITH_AS(g.add_task({.id = "u", .allocs = {b}}),
                       "task 'u': buffer 'b' is already allocated by task 't'", GraphError);
  g.add_task({.id = "v", .frees = {b}});
  CHECK_THROWS_AS(g.add_task({.id = "w", .frees = {b}}), GraphError);
  CHECK(g.num_tasks() == 2);  // failed adds leave no trace
}

TEST_CASE("sim/task_graph: a copied graph is independent of its source") {
  // Adding to the copy leaves the original at 2 tasks and 1 edge.
  TaskGraph g;
  auto a = g.add_task({.id = "a"});
  auto b = g.add_task({.id = "b"});
  g.add_dep(a, b);
  TaskGraph h = g;
  h.add_dep(b, h.add_task({.id = "c"}));
  CHECK(g.num_tasks() == 2);
  CHECK(g.num_edges() == 1);
  CHECK(h.num_tasks() == 3);
  CHECK(h.num_edges() == 2);
  CHECK(simulate(h).tasks.size() == 3);
}

TEST_CASE("sim/task_graph: a task can be added with its predecessors") {
  // c after a and b: 2 edges; d after c via add_deps: 3; an unknown predecessor adds nothing.
  TaskGraph g;
  auto a = g.add_task({.id = "a"});
  auto b = g.add_task({.id = "b"});
  auto c = g.add_task({.id = "c"}, {a, b});
  CHECK(g.num_edges() == 2);
  const std::vector<TaskId> before{c};
  auto d = g.add_task({.id = "d"});
  g.add_deps(before, d);
  CHECK(g.num_edges() == 3);
  CHECK_THROWS_AS(g.add_task({.id = "e"}, {TaskId{9}}), GraphError);
  CHECK(g.num_tasks() == 4);
  const RunResult r = simulate(g);
  CHECK(r.at(d).start >= r.at(c).end);
}

}  // namespace
}  // namespace strata::sim
