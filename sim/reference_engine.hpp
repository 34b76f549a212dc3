#pragma once
// A slow, direct implementation of the simulation semantics, kept to check
// Engine: the engine-level tests run against both (engine_test.cpp).
//
// It shares no replay code with Engine. Streams are explicit queues with a
// head (no stream-order edges), worker pools are FIFO queues, time advances
// instant by instant to the earliest phase end, every task is scanned at
// every instant, and link rates come from max_min_rates() over all active
// transfers. Within an instant it applies the same rules as Engine: all
// completions first, then starts in task order (worker pools in pool order,
// first come first served), then one rate update — so both give identical
// results, bit for bit. O(tasks × instants): for tests and small graphs.
#include "sim/engine.hpp"
#include "sim/task_graph.hpp"

namespace strata::sim {

class ReferenceEngine {
 public:
  explicit ReferenceEngine(const TaskGraph& graph, CostFn cost = {});
  ReferenceEngine(TaskGraph&&, CostFn = {}) = delete;  // keeps a reference to the graph

  RunResult run();

 private:
  const TaskGraph* graph_;
  std::vector<Time> fixed_;
};

}  // namespace strata::sim
