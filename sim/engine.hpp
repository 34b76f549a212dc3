#pragma once
// Discrete-event replay of a TaskGraph on modelled resources.
//
//   sim::Engine engine(graph, cost);          // validates and compiles the graph
//   sim::RunResult r = engine.run();          // replays it (repeatable)
//   r.makespan; r.at(task).start; r.resources[i].busy; r.pools[p].peak; r.oom
//
// Time is integer nanoseconds; events are ordered by (time, sequence number),
// so a run is deterministic bit for bit. A task starts once all its
// dependencies (and, on a stream, the task enqueued before it) have ended and,
// on a worker pool, a slot is free (first come, first served). Its fixed part
// (`duration`, or the cost function's answer) runs first, then its transfer
// bytes move across its links at the max-min fair share (recomputed exactly
// whenever a transfer starts or finishes; a completion lands on the first
// whole nanosecond by which the bytes are through), then `latency_after`.
// Buffers are allocated at the task's start and freed at its end; exceeding a
// pool's capacity is recorded (first occurrence) and the run goes on.
//
// Within one instant, every task end (and its frees) is handled before any
// task start (and its allocations), and tasks that become ready at the same
// instant start in task order (the order they were added), so results do not
// depend on how the engine orders simultaneous events internally.
//
// The engine compiles the graph once into flat arrays (int32 indices,
// contiguous successor lists, durations resolved through the cost function)
// and keeps no global state: engines on different threads are independent
// (one engine is not to be run from two threads at once). The graph must
// outlive the engine.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "sim/memory.hpp"
#include "sim/task_graph.hpp"
#include "sim/units.hpp"

namespace strata::sim {

// Turns a task's work (flops, mem_bytes, …) into its fixed time. Called once
// per task without a `duration`, when the engine is built.
using CostFn = std::function<Time(const Task&)>;

// The fixed part of a task's time: its `duration`, else cost(task); a task
// with neither a duration nor a cost function takes 0 ns if it carries no
// work (flops, mem_bytes) and is a GraphError otherwise, as is a negative cost.
Time resolve_fixed_time(const Task& task, const CostFn& cost);

struct TaskTiming {
  Time start = 0;
  Time end = 0;
};

struct ResourceUsage {
  Time busy = 0;   // time with at least one task on it (links: one flow moving bytes)
  std::int64_t tasks = 0;
  Bytes bytes = 0; // links: transfer bytes carried
};

struct RunResult {
  Time makespan = 0;                     // end of the last task
  std::vector<TaskTiming> tasks;         // by TaskId index
  std::vector<ResourceUsage> resources;  // by ResourceId index
  std::vector<PoolUsage> pools;          // by PoolId index
  std::optional<OutOfMemory> oom;        // first allocation that did not fit
  std::uint64_t events = 0;              // events processed
  std::uint64_t stale_events = 0;        // cancelled completions skipped

  const TaskTiming& at(TaskId t) const { return tasks[static_cast<std::size_t>(t.index)]; }
  const ResourceUsage& at(ResourceId r) const {
    return resources[static_cast<std::size_t>(r.index)];
  }
  const PoolUsage& at(PoolId p) const { return pools[static_cast<std::size_t>(p.index)]; }
  bool fits() const { return !oom; }
  // Bytes held by the result's containers.
  std::size_t memory_bytes() const;
};

class Engine {
 public:
  // Checks the graph (cycles through dependencies and stream order) and
  // compiles it. A task without `duration` gets cost(task); without a cost
  // function such a task must carry no work (flops and mem_bytes zero) and
  // takes 0 ns. Throws GraphError.
  explicit Engine(const TaskGraph& graph, CostFn cost = {});
  Engine(TaskGraph&&, CostFn = {}) = delete;  // the engine keeps a reference to the graph
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // Replays the graph from t = 0. May be called again; each run is identical.
  RunResult run();

  const TaskGraph& graph() const;
  // The resolved fixed part of a task's time.
  Time fixed_time(TaskId t) const;
  // Bytes held by the compiled graph and the run state (container capacities).
  std::size_t state_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Engine(graph, cost).run().
RunResult simulate(const TaskGraph& graph, CostFn cost = {});

}  // namespace strata::sim
