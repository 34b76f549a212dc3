#pragma once
// TaskGraph: the intermediate representation the simulator replays and the
// executors run. A lowering builds it through a typed API:
//
//   sim::TaskGraph g;
//   auto s0   = g.add_stream("r0.compute");
//   auto nv   = g.add_link("nvlink", 450 * kGB);          // bytes per second
//   auto gpu0 = g.add_pool("r0", 80 * kGiB);
//   auto act  = g.add_buffer({.id = "act/L3/mb2", .pool = gpu0, .bytes = 2 * kMiB,
//                             .tag = sim::MemTag::Activations});
//   auto fwd  = g.add_task({.id = "r0:fwd/L3/mb2", .kind = sim::TaskKind::Compute,
//                           .resources = {s0}, .duration = 120 * kMicrosecond,
//                           .allocs = {act}});
//   auto bwd  = g.add_task({...,  .frees = {act}}, {fwd});   // or g.add_dep(fwd, bwd)
//
// Resources: streams and copy engines run one task at a time in the order the
// tasks were added to the graph (as a framework enqueues kernels); worker pools
// run up to N tasks at once, first come first served; links have a bandwidth
// shared max-min fair between the transfers that cross them. A task uses at
// most one queue resource (stream, copy engine or worker pool) plus any
// number of links.
//
// A task's time is: `duration` (or, when absent, the engine's cost function
// applied to the task) — for a transfer this is its fixed latency — then
// `transfer_bytes` moved across every link in `resources` at the max-min
// share, then `latency_after`. Buffers in `allocs` become live when the task
// starts; buffers in `frees` die when it ends.
//
// The dependency structure lives in a Boost.Graph adjacency list (explicit
// dependencies plus the implicit edges of stream order); the engine compiles
// it into flat arrays before replaying it.
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/error.hpp"
#include "sim/names.hpp"
#include "sim/units.hpp"

namespace strata::sim {

// A malformed task graph: a cycle, an unknown resource, pool, buffer or task,
// a duplicate id, a buffer allocated twice. Names the offending objects.
class GraphError : public Error {
 public:
  using Error::Error;
};

enum class TaskKind : std::uint8_t { Compute, Collective, P2PSend, P2PRecv, Copy, Host };
enum class ResourceKind : std::uint8_t { Stream, CopyEngine, WorkerPool, Link };
enum class Phase : std::uint8_t { None, Fwd, Bwd, Recompute, Optim, Comm };
enum class MemTag : std::uint8_t {
  Params,
  Grads,
  OptimizerStates,
  Activations,
  CommBuffers,
  Workspace,
  AllocatorReserve,
  Runtime,  // CUDA context and library handles: device memory outside the allocator
  Other,
};
inline constexpr std::size_t kMemTagCount = 9;
using TagBytes = std::array<Bytes, kMemTagCount>;  // indexed by MemTag

// Dense typed handles. Only a graph hands them out; `index` is the position
// in that graph's tables (0-based, int32 so compiled arrays stay small).
template <class Tag>
struct Handle {
  std::int32_t index = 0;
  friend constexpr bool operator==(Handle, Handle) = default;
  friend constexpr auto operator<=>(Handle, Handle) = default;
};
using TaskId = Handle<struct TaskTag>;
using ResourceId = Handle<struct ResourceTag>;
using PoolId = Handle<struct PoolTag>;
using BufferId = Handle<struct BufferTag>;

// What a task is, for traces and for matching against measurements.
struct Label {
  std::optional<int> rank;
  std::optional<int> stage;
  std::optional<int> microbatch;
  std::optional<int> layer;
  Phase phase = Phase::None;
};

// What a queue resource is for on the device it models: one lane of one
// pipeline stage's representative rank. A lowering sets it; executors,
// attribution and reports read it instead of parsing the resource's name.
enum class Lane : std::uint8_t { None, Compute, Comm, P2P, D2H, H2D, Cpu };
inline constexpr std::size_t kLaneCount = 7;
struct Role {
  std::int32_t stage = -1;  // −1: not a stage's resource
  Lane lane = Lane::None;
  friend constexpr bool operator==(Role, Role) = default;
};

struct Resource {
  std::string name;
  ResourceKind kind = ResourceKind::Stream;
  Role role;                      // typed identity; the name is for people
  int slots = 1;                  // worker pools: concurrent tasks; else 1
  double bytes_per_second = 0.0;  // links only
  // Bandwidth in the engine's unit (division keeps round figures exact:
  // 10e9 B/s is exactly 10 B/ns).
  double bytes_per_ns() const { return bytes_per_second / 1e9; }
};

struct MemoryPool {
  std::string name;
  Bytes capacity = 0;
};

struct Buffer {
  std::string id;          // stable id, e.g. "act/L3/mb2"
  PoolId pool;
  Bytes bytes = 0;
  MemTag tag = MemTag::Other;
  bool live_at_start = false;  // resident before any task runs (e.g. parameters)
};

struct Task {
  std::string id;  // unique, e.g. "r0:fwd/L3/mb2"
  TaskKind kind = TaskKind::Compute;
  // At most one stream / copy engine / worker pool, plus any links.
  std::vector<ResourceId> resources;
  // Fixed time (for a transfer: its latency before the bytes). When absent,
  // the engine's cost function turns the work below into time.
  std::optional<Time> duration;
  Flops flops = 0;          // work for the cost function
  Bytes mem_bytes = 0;      // memory traffic for the cost function
  Bytes transfer_bytes = 0; // bytes across every link in `resources` (shared bandwidth)
  Time latency_after = 0;   // fixed time after the bytes
  std::vector<BufferId> allocs;  // live from the task's start
  std::vector<BufferId> frees;   // dead from the task's end
  Label label;
};

// Why an edge exists: a dependency the lowering added, or the order of two
// consecutive tasks on one stream or copy engine.
enum class EdgeKind : std::uint8_t { Dependency, StreamOrder };

class TaskGraph {
 public:
  TaskGraph();
  ~TaskGraph();
  TaskGraph(const TaskGraph&);
  TaskGraph& operator=(const TaskGraph&);
  TaskGraph(TaskGraph&&) noexcept;
  TaskGraph& operator=(TaskGraph&&) noexcept;

  // --- resources (names are unique across all resources) ---
  ResourceId add_stream(std::string name, Role role = {});
  ResourceId add_copy_engine(std::string name, Role role = {});
  ResourceId add_worker_pool(std::string name, int slots, Role role = {});
  ResourceId add_link(std::string name, double bytes_per_second);
  // --- memory ---
  PoolId add_pool(std::string name, Bytes capacity);
  BufferId add_buffer(Buffer buffer);
  // --- tasks and dependencies ---
  // Validates the task (known handles, one queue resource at most, links for
  // transfer bytes, non-negative times, each buffer allocated and freed at most
  // once) and enqueues it on its stream after the tasks added before it.
  TaskId add_task(Task task);
  // Room for this many tasks and buffers in all, so building a large graph
  // does not rehash or reallocate as it grows.
  void reserve(std::size_t tasks, std::size_t buffers);
  // add_task, then a dependency on each of `after_these`.
  TaskId add_task(Task task, std::initializer_list<TaskId> after_these);
  // `after` starts only once `before` has ended.
  void add_dep(TaskId before, TaskId after);
  void add_dep(std::string_view before, std::string_view after);
  void add_deps(std::span<const TaskId> before, TaskId after);
  // The task takes exactly `t` from now on: its duration becomes t and it
  // moves no bytes over links (what replaying measured task times needs).
  // Throws GraphError for an unknown task or a negative time.
  void replace_time(TaskId task, Time t);

  // --- lookup (throw GraphError naming the unknown id) ---
  ResourceId resource(std::string_view name) const;
  PoolId pool(std::string_view name) const;
  BufferId buffer(std::string_view id) const;
  TaskId task(std::string_view id) const;

  std::size_t num_tasks() const { return tasks_.size(); }
  std::size_t num_resources() const { return resources_.size(); }
  std::size_t num_pools() const { return pools_.size(); }
  std::size_t num_buffers() const { return buffers_.size(); }
  std::size_t num_edges() const;

  const Task& at(TaskId t) const { return tasks_[static_cast<std::size_t>(t.index)]; }
  const Resource& at(ResourceId r) const { return resources_[static_cast<std::size_t>(r.index)]; }
  const MemoryPool& at(PoolId p) const { return pools_[static_cast<std::size_t>(p.index)]; }
  const Buffer& at(BufferId b) const { return buffers_[static_cast<std::size_t>(b.index)]; }
  const std::vector<Task>& tasks() const { return tasks_; }
  const std::vector<Resource>& resources() const { return resources_; }
  const std::vector<MemoryPool>& pools() const { return pools_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }

  // Visits every edge (explicit and stream order) as fn(from, to, kind), in
  // order of the source task and then of insertion.
  using EdgeVisitor = std::function<void(TaskId from, TaskId to, EdgeKind kind)>;
  void for_each_edge(const EdgeVisitor& fn) const;

  // Throws GraphError naming the tasks on a cycle (dependencies plus stream
  // order) if there is one.
  void check_acyclic() const;
  // What the engines check before a run: check_acyclic(), and that every
  // freed buffer is allocated by some task or live at start.
  void validate() const;

 private:
  struct Adjacency;  // Boost.Graph adjacency list (task_graph.cpp)
  std::int32_t add_resource(Resource r);
  void check(ResourceId r, const std::string& who) const;
  void check(BufferId b, const std::string& who) const;

  std::vector<Resource> resources_;
  std::vector<MemoryPool> pools_;
  std::vector<Buffer> buffers_;
  std::vector<Task> tasks_;
  std::vector<std::int32_t> last_on_queue_;    // per resource: last task enqueued (-1 none)
  std::vector<std::int32_t> buffer_alloc_by_;  // per buffer: allocating task (-1 none)
  std::vector<std::int32_t> buffer_free_by_;   // per buffer: freeing task (-1 none)
  std::unordered_map<std::string, std::int32_t> resource_by_name_, pool_by_name_,
      buffer_by_id_, task_by_id_;
  std::unique_ptr<Adjacency> adj_;
};

}  // namespace strata::sim

namespace strata {
template <>
struct EnumNames<sim::TaskKind> {
  static constexpr std::array<std::pair<sim::TaskKind, std::string_view>, 6> table{{
      {sim::TaskKind::Compute, "compute"},
      {sim::TaskKind::Collective, "collective"},
      {sim::TaskKind::P2PSend, "p2p-send"},
      {sim::TaskKind::P2PRecv, "p2p-recv"},
      {sim::TaskKind::Copy, "copy"},
      {sim::TaskKind::Host, "host"},
  }};
};
template <>
struct EnumNames<sim::Lane> {
  static constexpr std::array<std::pair<sim::Lane, std::string_view>, sim::kLaneCount> table{{
      {sim::Lane::None, "none"},
      {sim::Lane::Compute, "compute"},
      {sim::Lane::Comm, "comm"},
      {sim::Lane::P2P, "p2p"},
      {sim::Lane::D2H, "d2h"},
      {sim::Lane::H2D, "h2d"},
      {sim::Lane::Cpu, "cpu"},
  }};
};
template <>
struct EnumNames<sim::ResourceKind> {
  static constexpr std::array<std::pair<sim::ResourceKind, std::string_view>, 4> table{{
      {sim::ResourceKind::Stream, "stream"},
      {sim::ResourceKind::CopyEngine, "copy-engine"},
      {sim::ResourceKind::WorkerPool, "worker-pool"},
      {sim::ResourceKind::Link, "link"},
  }};
};
template <>
struct EnumNames<sim::Phase> {
  static constexpr std::array<std::pair<sim::Phase, std::string_view>, 6> table{{
      {sim::Phase::None, "none"},
      {sim::Phase::Fwd, "fwd"},
      {sim::Phase::Bwd, "bwd"},
      {sim::Phase::Recompute, "recompute"},
      {sim::Phase::Optim, "optim"},
      {sim::Phase::Comm, "comm"},
  }};
};
template <>
struct EnumNames<sim::MemTag> {
  static constexpr std::array<std::pair<sim::MemTag, std::string_view>, sim::kMemTagCount> table{{
      {sim::MemTag::Params, "params"},
      {sim::MemTag::Grads, "grads"},
      {sim::MemTag::OptimizerStates, "optimizer_states"},
      {sim::MemTag::Activations, "activations"},
      {sim::MemTag::CommBuffers, "comm_buffers"},
      {sim::MemTag::Workspace, "workspace"},
      {sim::MemTag::AllocatorReserve, "allocator_reserve"},
      {sim::MemTag::Runtime, "runtime"},
      {sim::MemTag::Other, "other"},
  }};
};
}  // namespace strata
