#include "sim/task_graph.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>

namespace strata::sim {

namespace {
struct EdgeProp {
  EdgeKind kind = EdgeKind::Dependency;
};
using BglGraph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property, EdgeProp>;
using Vertex = boost::graph_traits<BglGraph>::vertex_descriptor;
using BglEdge = boost::graph_traits<BglGraph>::edge_descriptor;

bool is_queue(ResourceKind k) { return k != ResourceKind::Link; }
bool is_stream_like(ResourceKind k) {
  return k == ResourceKind::Stream || k == ResourceKind::CopyEngine;
}

std::string quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '\'';
  q += s;
  q += '\'';
  return q;
}

// Stops the depth-first search at the first back edge.
struct CycleFound {
  BglEdge edge;
};
struct CycleVisitor : boost::default_dfs_visitor {
  std::vector<std::int32_t>* parent;
  std::vector<EdgeKind>* parent_kind;
  void tree_edge(BglEdge e, const BglGraph& g) const {
    const auto v = boost::target(e, g);
    (*parent)[v] = static_cast<std::int32_t>(boost::source(e, g));
    (*parent_kind)[v] = g[e].kind;
  }
  void back_edge(BglEdge e, const BglGraph&) const { throw CycleFound{e}; }
};
}  // namespace

struct TaskGraph::Adjacency {
  BglGraph g;
  std::size_t edges = 0;  // boost::num_edges walks every edge for directedS
};

TaskGraph::TaskGraph() : adj_(std::make_unique<Adjacency>()) {}
TaskGraph::~TaskGraph() = default;
TaskGraph::TaskGraph(TaskGraph&&) noexcept = default;
TaskGraph& TaskGraph::operator=(TaskGraph&&) noexcept = default;
TaskGraph::TaskGraph(const TaskGraph& o)
    : resources_(o.resources_),
      pools_(o.pools_),
      buffers_(o.buffers_),
      tasks_(o.tasks_),
      last_on_queue_(o.last_on_queue_),
      buffer_alloc_by_(o.buffer_alloc_by_),
      buffer_free_by_(o.buffer_free_by_),
      resource_by_name_(o.resource_by_name_),
      pool_by_name_(o.pool_by_name_),
      buffer_by_id_(o.buffer_by_id_),
      task_by_id_(o.task_by_id_),
      adj_(std::make_unique<Adjacency>()) {
  // Copied edge by edge: BGL's own copy walks an edge iterator GCC 12 warns about.
  const BglGraph& from = o.adj_->g;
  for (Vertex v = 0; v < boost::num_vertices(from); ++v) boost::add_vertex(adj_->g);
  for (Vertex v = 0; v < boost::num_vertices(from); ++v) {
    auto [it, end] = boost::out_edges(v, from);
    for (; it != end; ++it) boost::add_edge(v, boost::target(*it, from), from[*it], adj_->g);
  }
  adj_->edges = o.adj_->edges;
}
TaskGraph& TaskGraph::operator=(const TaskGraph& o) {
  if (this != &o) *this = TaskGraph(o);
  return *this;
}

std::int32_t TaskGraph::add_resource(Resource r) {
  if (r.name.empty()) throw GraphError("resource name must not be empty");
  const auto idx = static_cast<std::int32_t>(resources_.size());
  if (!resource_by_name_.emplace(r.name, idx).second)
    throw GraphError("duplicate resource name " + quoted(r.name));
  resources_.push_back(std::move(r));
  last_on_queue_.push_back(-1);
  return idx;
}

ResourceId TaskGraph::add_stream(std::string name, Role role) {
  return ResourceId{add_resource({std::move(name), ResourceKind::Stream, role, 1, 0.0})};
}
ResourceId TaskGraph::add_copy_engine(std::string name, Role role) {
  return ResourceId{add_resource({std::move(name), ResourceKind::CopyEngine, role, 1, 0.0})};
}
ResourceId TaskGraph::add_worker_pool(std::string name, int slots, Role role) {
  if (slots < 1)
    throw GraphError("worker pool " + quoted(name) + ": slots must be >= 1, got " +
                     std::to_string(slots));
  return ResourceId{add_resource({std::move(name), ResourceKind::WorkerPool, role, slots, 0.0})};
}
ResourceId TaskGraph::add_link(std::string name, double bytes_per_second) {
  if (!(bytes_per_second > 0.0))
    throw GraphError("link " + quoted(name) + ": bandwidth must be > 0 bytes/s, got " +
                     std::to_string(bytes_per_second));
  return ResourceId{add_resource({std::move(name), ResourceKind::Link, {}, 1, bytes_per_second})};
}

PoolId TaskGraph::add_pool(std::string name, Bytes capacity) {
  if (name.empty()) throw GraphError("pool name must not be empty");
  if (capacity < 0)
    throw GraphError("pool " + quoted(name) + ": capacity must be >= 0, got " +
                     std::to_string(capacity));
  const auto idx = static_cast<std::int32_t>(pools_.size());
  if (!pool_by_name_.emplace(name, idx).second)
    throw GraphError("duplicate pool name " + quoted(name));
  pools_.push_back({std::move(name), capacity});
  return PoolId{idx};
}

BufferId TaskGraph::add_buffer(Buffer b) {
  if (b.id.empty()) throw GraphError("buffer id must not be empty");
  if (b.pool.index < 0 || static_cast<std::size_t>(b.pool.index) >= pools_.size())
    throw GraphError("buffer " + quoted(b.id) + ": unknown pool #" + std::to_string(b.pool.index) +
                     " (graph has " + std::to_string(pools_.size()) + " pools)");
  if (b.bytes < 0)
    throw GraphError("buffer " + quoted(b.id) + ": bytes must be >= 0, got " +
                     std::to_string(b.bytes));
  const auto idx = static_cast<std::int32_t>(buffers_.size());
  if (!buffer_by_id_.emplace(b.id, idx).second)
    throw GraphError("duplicate buffer id " + quoted(b.id));
  buffers_.push_back(std::move(b));
  buffer_alloc_by_.push_back(-1);
  buffer_free_by_.push_back(-1);
  return BufferId{idx};
}

void TaskGraph::check(ResourceId r, const std::string& who) const {
  if (r.index < 0 || static_cast<std::size_t>(r.index) >= resources_.size())
    throw GraphError(who + ": unknown resource #" + std::to_string(r.index) + " (graph has " +
                     std::to_string(resources_.size()) + " resources)");
}
void TaskGraph::check(BufferId b, const std::string& who) const {
  if (b.index < 0 || static_cast<std::size_t>(b.index) >= buffers_.size())
    throw GraphError(who + ": unknown buffer #" + std::to_string(b.index) + " (graph has " +
                     std::to_string(buffers_.size()) + " buffers)");
}

void TaskGraph::reserve(std::size_t tasks, std::size_t buffers) {
  tasks_.reserve(tasks);
  task_by_id_.reserve(tasks);
  buffers_.reserve(buffers);
  buffer_by_id_.reserve(buffers);
  buffer_alloc_by_.reserve(buffers);
  buffer_free_by_.reserve(buffers);
  adj_->g.m_vertices.reserve(tasks);
}

TaskId TaskGraph::add_task(Task t) {
  if (t.id.empty()) throw GraphError("task id must not be empty");
  const std::string who = "task " + quoted(t.id);
  if (task_by_id_.contains(t.id)) throw GraphError("duplicate task id " + quoted(t.id));
  std::optional<ResourceId> queue;
  bool has_link = false;
  for (std::size_t i = 0; i < t.resources.size(); ++i) {
    const ResourceId r = t.resources[i];
    check(r, who);
    if (std::find(t.resources.begin(), t.resources.begin() + static_cast<std::ptrdiff_t>(i), r) !=
        t.resources.begin() + static_cast<std::ptrdiff_t>(i))
      throw GraphError(who + ": uses resource " + quoted(at(r).name) + " twice");
    const Resource& res = at(r);
    if (is_queue(res.kind)) {
      if (queue)
        throw GraphError(who + ": uses two queue resources (" + quoted(at(*queue).name) + " and " +
                         quoted(res.name) + "); a task runs on at most one stream, copy engine "
                         "or worker pool");
      queue = r;
    } else {
      has_link = true;
    }
  }
  if (t.duration && *t.duration < 0)
    throw GraphError(who + ": duration must be >= 0 ns, got " + std::to_string(*t.duration));
  if (t.latency_after < 0)
    throw GraphError(who + ": latency_after must be >= 0 ns, got " +
                     std::to_string(t.latency_after));
  if (t.transfer_bytes < 0 || t.mem_bytes < 0 || t.flops < 0)
    throw GraphError(who + ": flops, mem_bytes and transfer_bytes must be >= 0");
  if (t.transfer_bytes > 0 && !has_link)
    throw GraphError(who + ": has transfer_bytes=" + std::to_string(t.transfer_bytes) +
                     " but no link among its resources");
  for (BufferId b : t.allocs) {
    check(b, who);
    if (buffer_alloc_by_[b.index] >= 0)
      throw GraphError(who + ": buffer " + quoted(at(b).id) + " is already allocated by task " +
                       quoted(tasks_[buffer_alloc_by_[b.index]].id));
    if (at(b).live_at_start)
      throw GraphError(who + ": buffer " + quoted(at(b).id) +
                       " is live at start and cannot be allocated by a task");
  }
  for (BufferId b : t.frees) {
    check(b, who);
    if (buffer_free_by_[b.index] >= 0)
      throw GraphError(who + ": buffer " + quoted(at(b).id) + " is already freed by task " +
                       quoted(tasks_[buffer_free_by_[b.index]].id));
  }
  // All checks passed: commit.
  const auto idx = static_cast<std::int32_t>(tasks_.size());
  for (BufferId b : t.allocs) buffer_alloc_by_[b.index] = idx;
  for (BufferId b : t.frees) buffer_free_by_[b.index] = idx;
  task_by_id_.emplace(t.id, idx);
  tasks_.push_back(std::move(t));
  boost::add_vertex(adj_->g);
  if (queue && is_stream_like(at(*queue).kind)) {
    std::int32_t& last = last_on_queue_[queue->index];
    if (last >= 0) {
      boost::add_edge(Vertex(last), Vertex(idx), EdgeProp{EdgeKind::StreamOrder}, adj_->g);
      ++adj_->edges;
    }
    last = idx;
  }
  return TaskId{idx};
}

void TaskGraph::add_dep(TaskId before, TaskId after) {
  for (TaskId t : {before, after})
    if (t.index < 0 || static_cast<std::size_t>(t.index) >= tasks_.size())
      throw GraphError("dependency: unknown task #" + std::to_string(t.index) + " (graph has " +
                       std::to_string(tasks_.size()) + " tasks)");
  boost::add_edge(Vertex(before.index), Vertex(after.index), EdgeProp{EdgeKind::Dependency},
                  adj_->g);
  ++adj_->edges;
}
TaskId TaskGraph::add_task(Task task, std::initializer_list<TaskId> after_these) {
  for (TaskId t : after_these)  // check first: a failed add leaves no trace
    if (t.index < 0 || static_cast<std::size_t>(t.index) >= tasks_.size())
      throw GraphError("task '" + task.id + "': unknown predecessor task #" +
                       std::to_string(t.index));
  const TaskId id = add_task(std::move(task));
  for (TaskId t : after_these) add_dep(t, id);
  return id;
}

void TaskGraph::add_deps(std::span<const TaskId> before, TaskId after) {
  for (TaskId t : before) add_dep(t, after);
}

void TaskGraph::add_dep(std::string_view before, std::string_view after) {
  add_dep(task(before), task(after));
}

namespace {
template <class Map>
std::int32_t lookup(const Map& m, std::string_view key, const char* what) {
  auto it = m.find(std::string(key));
  if (it == m.end()) throw GraphError(std::string("unknown ") + what + " " + quoted(key));
  return it->second;
}
}  // namespace

ResourceId TaskGraph::resource(std::string_view name) const {
  return ResourceId{lookup(resource_by_name_, name, "resource")};
}
PoolId TaskGraph::pool(std::string_view name) const {
  return PoolId{lookup(pool_by_name_, name, "pool")};
}
BufferId TaskGraph::buffer(std::string_view id) const {
  return BufferId{lookup(buffer_by_id_, id, "buffer")};
}
TaskId TaskGraph::task(std::string_view id) const {
  return TaskId{lookup(task_by_id_, id, "task")};
}

void TaskGraph::replace_time(TaskId task, Time t) {
  if (task.index < 0 || static_cast<std::size_t>(task.index) >= tasks_.size())
    throw GraphError("replace_time: unknown task index " + std::to_string(task.index));
  Task& k = tasks_[static_cast<std::size_t>(task.index)];
  if (t < 0)
    throw GraphError("task " + quoted(k.id) + ": time must be >= 0, got " + std::to_string(t) + " ns");
  k.duration = t;
  k.transfer_bytes = 0;
  k.latency_after = 0;
}

std::size_t TaskGraph::num_edges() const { return adj_->edges; }

void TaskGraph::for_each_edge(const EdgeVisitor& fn) const {
  const BglGraph& g = adj_->g;
  for (Vertex v = 0; v < boost::num_vertices(g); ++v) {
    auto [it, end] = boost::out_edges(v, g);
    for (; it != end; ++it)
      fn(TaskId{static_cast<std::int32_t>(v)},
         TaskId{static_cast<std::int32_t>(boost::target(*it, g))}, g[*it].kind);
  }
}

void TaskGraph::validate() const {
  for (std::size_t b = 0; b < buffers_.size(); ++b)
    if (buffer_free_by_[b] >= 0 && buffer_alloc_by_[b] < 0 && !buffers_[b].live_at_start)
      throw GraphError("task " + quoted(tasks_[buffer_free_by_[b]].id) + " frees buffer " +
                       quoted(buffers_[b].id) +
                       ", which no task allocates and which is not live at start");
  check_acyclic();
}

void TaskGraph::check_acyclic() const {
  const BglGraph& g = adj_->g;
  const std::size_t n = boost::num_vertices(g);
  std::vector<std::int32_t> parent(n, -1);
  std::vector<EdgeKind> parent_kind(n, EdgeKind::Dependency);
  CycleVisitor vis;
  vis.parent = &parent;
  vis.parent_kind = &parent_kind;
  try {
    boost::depth_first_search(g, boost::visitor(vis));
  } catch (const CycleFound& found) {
    // The back edge u -> v closes the tree path v -> ... -> u.
    const auto u = static_cast<std::int32_t>(boost::source(found.edge, g));
    const auto v = static_cast<std::int32_t>(boost::target(found.edge, g));
    std::vector<std::pair<std::int32_t, EdgeKind>> path;  // (task, kind of edge into it)
    path.emplace_back(v, g[found.edge].kind);
    for (std::int32_t x = u; x != v; x = parent[x]) path.emplace_back(x, parent_kind[x]);
    std::reverse(path.begin() + 1, path.end());
    // path: v, then tasks from v's child to u; edge kinds are of the edge into each.
    std::string msg = "dependency cycle: " + quoted(tasks_[v].id);
    auto arrow = [&](EdgeKind k, std::int32_t to) {
      msg += k == EdgeKind::StreamOrder ? " -(stream order)-> " : " -> ";
      msg += quoted(tasks_[to].id);
    };
    constexpr std::size_t kMaxShown = 16;
    for (std::size_t i = 1; i < path.size() && i <= kMaxShown; ++i)
      arrow(path[i].second, path[i].first);
    if (path.size() > kMaxShown + 1)
      msg += " -> ... (" + std::to_string(path.size() - kMaxShown - 1) + " more)";
    arrow(path[0].second, v);
    throw GraphError(msg);
  }
}

}  // namespace strata::sim
