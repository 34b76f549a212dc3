#include "sim/engine.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "sim/bandwidth.hpp"
#include "sim/event_queue.hpp"

namespace strata::sim {

namespace {
template <class V>
std::size_t cap_bytes(const V& v) {
  return v.capacity() * sizeof(typename V::value_type);
}
}  // namespace

std::size_t RunResult::memory_bytes() const {
  std::size_t b = cap_bytes(tasks) + cap_bytes(resources) + cap_bytes(pools);
  for (const auto& p : pools) b += cap_bytes(p.timeline) + cap_bytes(p.changes);
  return b;
}

struct Engine::Impl {
  // A task that touches links or has a tail latency.
  struct Transfer {
    double bytes = 0;
    Time latency_after = 0;
    std::int32_t link_off = 0;
    std::int32_t nlinks = 0;
  };

  explicit Impl(const TaskGraph& graph, const CostFn& cost);
  RunResult run();

  // What the replay reads about a task, in one 32-byte record so that
  // starting or ending a task touches one cache line.
  struct Node {
    Time fixed = 0;             // resolved fixed part
    std::int32_t queue = -1;    // stream / copy engine / worker pool, or -1
    std::int32_t xfer = -1;     // index into transfers, or -1
    std::int32_t succ_begin = 0, succ_end = 0;  // range in succ
    std::int32_t mem = -1;      // offset in mem of {nallocs, nfrees, allocs..., frees...}, or -1
    std::int32_t npred0 = 0;    // unmet predecessors at t = 0
  };
  static_assert(sizeof(Node) == 32);

  // --- compiled graph (int32 indices, contiguous lists) ---
  const TaskGraph* g;
  std::int32_t n = 0;
  std::vector<Node> nodes;
  std::vector<Transfer> transfers;
  std::vector<std::int32_t> xfer_links;  // links of all transfers, contiguous
  std::vector<std::int32_t> succ;        // successors (dependencies and stream order)
  std::vector<std::int32_t> mem;         // per task with buffers: counts, then buffer indices
  std::vector<std::uint8_t> is_pool;     // per resource: worker pool (slots) or not
  std::vector<std::int32_t> slots;       // per resource

  // --- run state ---
  std::vector<std::int32_t> npred;
  EventQueue events;
  LinkSharing links;
  MemoryTracker memory;
  std::vector<std::int32_t> active;      // per resource: tasks/flows on it now
  std::vector<Time> since;               // per resource: start of the busy period
  std::vector<std::int32_t> free_slots;  // per resource (worker pools)
  std::vector<std::vector<std::int32_t>> fifo;  // per worker pool: waiting tasks
  std::vector<std::size_t> fifo_head;
  std::vector<std::uint8_t> pool_dirty;  // per resource: a slot or a waiter came this instant
  std::vector<std::int32_t> dirty_pools;
  std::vector<std::int32_t> ready_now, starting;  // tasks whose predecessors are all done
  RunResult r;

  void start_ready(Time now);
  void start(std::int32_t t, Time now);
  void begin_transfer(std::int32_t t, Time now);
  void flow_done(std::int32_t f, Time now);
  void end(std::int32_t t, Time now);
  void schedule_changed_flows();

  void acquire(std::int32_t res, Time now) {
    if (active[res]++ == 0) since[res] = now;
  }
  void release(std::int32_t res, Time now) {
    if (--active[res] == 0) r.resources[res].busy += now - since[res];
  }
  std::size_t state_bytes() const;
};

Time resolve_fixed_time(const Task& task, const CostFn& cost) {
  if (task.duration) return *task.duration;
  if (cost) {
    const Time d = cost(task);
    if (d < 0)
      throw GraphError("task '" + task.id + "': cost function returned a negative time (" +
                       std::to_string(d) + " ns)");
    return d;
  }
  if (task.flops > 0 || task.mem_bytes > 0)
    throw GraphError("task '" + task.id +
                     "' has work (flops/mem_bytes) but no duration, and the engine has no "
                     "cost function");
  return 0;
}

namespace {
std::vector<double> link_capacities(const TaskGraph& g) {
  std::vector<double> c;
  for (const Resource& res : g.resources())
    c.push_back(res.kind == ResourceKind::Link ? res.bytes_per_ns() : 1.0);  // 1: unused
  return c;
}
}  // namespace

Engine::Impl::Impl(const TaskGraph& graph, const CostFn& cost)
    : g(&graph), links(link_capacities(graph)), memory(graph) {
  graph.validate();
  if (graph.num_edges() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw GraphError("graph has " + std::to_string(graph.num_edges()) +
                     " edges; the engine indexes them with 32-bit integers");
  const auto& tasks = graph.tasks();
  n = static_cast<std::int32_t>(tasks.size());
  const std::size_t nr = graph.num_resources();
  is_pool.resize(nr);
  slots.resize(nr);
  for (std::size_t i = 0; i < nr; ++i) {
    is_pool[i] = graph.resources()[i].kind == ResourceKind::WorkerPool;
    slots[i] = graph.resources()[i].slots;
  }

  nodes.resize(n);
  for (std::int32_t t = 0; t < n; ++t) {
    const Task& task = tasks[t];
    Node& node = nodes[t];
    node.fixed = resolve_fixed_time(task, cost);
    Transfer x;
    x.link_off = static_cast<std::int32_t>(xfer_links.size());
    for (ResourceId res : task.resources) {
      if (graph.at(res).kind == ResourceKind::Link)
        xfer_links.push_back(res.index);
      else
        node.queue = res.index;
    }
    x.nlinks = static_cast<std::int32_t>(xfer_links.size()) - x.link_off;
    if (x.nlinks > 0 || task.latency_after > 0) {
      x.bytes = static_cast<double>(task.transfer_bytes);
      x.latency_after = task.latency_after;
      node.xfer = static_cast<std::int32_t>(transfers.size());
      transfers.push_back(x);
    }
    if (!task.allocs.empty() || !task.frees.empty()) {
      node.mem = static_cast<std::int32_t>(mem.size());
      mem.push_back(static_cast<std::int32_t>(task.allocs.size()));
      mem.push_back(static_cast<std::int32_t>(task.frees.size()));
      for (BufferId b : task.allocs) mem.push_back(b.index);
      for (BufferId b : task.frees) mem.push_back(b.index);
    }
  }

  // Successor lists in CSR form; Boost.Graph gives out-edges grouped by source.
  succ.reserve(graph.num_edges());
  graph.for_each_edge([&](TaskId from, TaskId to, EdgeKind) {
    ++nodes[from.index].succ_end;
    ++nodes[to.index].npred0;
    succ.push_back(to.index);
  });
  std::int32_t offset = 0;
  for (Node& node : nodes) {
    node.succ_begin = offset;
    offset += node.succ_end;
    node.succ_end = offset;
  }

  active.assign(nr, 0);
  since.assign(nr, 0);
  free_slots.assign(nr, 0);
  fifo.resize(nr);
  fifo_head.assign(nr, 0);
  pool_dirty.assign(nr, 0);
}

// Starts the tasks that became ready at this instant, once every event of the
// instant is handled (so frees at an instant come before allocations), in
// task order; then hands free worker-pool slots to waiters, first come first
// served (pools in index order).
void Engine::Impl::start_ready(Time now) {
  starting.swap(ready_now);
  if (starting.size() > 1) std::sort(starting.begin(), starting.end());
  for (std::int32_t t : starting) {
    const std::int32_t q = nodes[t].queue;
    if (q >= 0 && is_pool[q]) {
      fifo[q].push_back(t);
      if (!pool_dirty[q]) {
        pool_dirty[q] = 1;
        dirty_pools.push_back(q);
      }
    } else {
      start(t, now);
    }
  }
  starting.clear();
  if (dirty_pools.empty()) return;
  if (dirty_pools.size() > 1) std::sort(dirty_pools.begin(), dirty_pools.end());
  for (std::int32_t q : dirty_pools) {
    pool_dirty[q] = 0;
    while (free_slots[q] > 0 && fifo_head[q] < fifo[q].size()) {
      --free_slots[q];
      start(fifo[q][fifo_head[q]++], now);
    }
    if (fifo_head[q] == fifo[q].size()) {  // all served: reuse the storage
      fifo[q].clear();
      fifo_head[q] = 0;
    }
  }
  dirty_pools.clear();
}

void Engine::Impl::start(std::int32_t t, Time now) {
  const Node& node = nodes[t];
  // The successor list is read when the task ends, events later; fetch it now.
  __builtin_prefetch(succ.data() + node.succ_begin);
  r.tasks[t].start = now;
  if (node.queue >= 0) {
    acquire(node.queue, now);
    ++r.resources[node.queue].tasks;
  }
  if (node.mem >= 0) {
    const std::int32_t* m = mem.data() + node.mem;
    for (std::int32_t k = 0; k < m[0]; ++k) memory.alloc(BufferId{m[2 + k]}, TaskId{t}, now);
  }
  if (node.xfer < 0)
    events.push(now + node.fixed, EventKind::TaskEnd, t);
  else if (node.fixed > 0)
    events.push(now + node.fixed, EventKind::TransferBegin, t);
  else
    begin_transfer(t, now);
}

void Engine::Impl::schedule_changed_flows() {
  for (std::int32_t f : links.changed())
    links.set_token(f, events.push(links.finish_time(f), EventKind::FlowDone, f));
}

void Engine::Impl::begin_transfer(std::int32_t t, Time now) {
  const Transfer& x = transfers[nodes[t].xfer];
  if (x.bytes > 0) {
    const std::int32_t* lk = xfer_links.data() + x.link_off;
    for (std::int32_t i = 0; i < x.nlinks; ++i) {
      acquire(lk[i], now);
      ++r.resources[lk[i]].tasks;
    }
    links.start(lk, x.nlinks, x.bytes, now, t);  // rate set at the end of the instant
  } else {
    // Never end a task from start(): chains of zero-time tasks would recurse.
    events.push(now + x.latency_after, EventKind::TaskEnd, t);
  }
}

void Engine::Impl::flow_done(std::int32_t f, Time now) {
  const std::int32_t t = links.owner(f);
  const Transfer& x = transfers[nodes[t].xfer];
  const std::int32_t* lk = xfer_links.data() + x.link_off;
  for (std::int32_t i = 0; i < x.nlinks; ++i) {
    release(lk[i], now);
    r.resources[lk[i]].bytes += static_cast<Bytes>(x.bytes);
  }
  links.finish(f);
  if (x.latency_after > 0)
    events.push(now + x.latency_after, EventKind::TaskEnd, t);
  else
    end(t, now);
}

void Engine::Impl::end(std::int32_t t, Time now) {
  r.tasks[t].end = now;
  r.makespan = std::max(r.makespan, now);
  const Node& node = nodes[t];
  if (node.mem >= 0) {
    const std::int32_t* m = mem.data() + node.mem;
    for (std::int32_t k = 0; k < m[1]; ++k) memory.free(BufferId{m[2 + m[0] + k]}, TaskId{t}, now);
  }
  const std::int32_t q = node.queue;
  if (q >= 0) {
    release(q, now);
    if (is_pool[q]) {
      ++free_slots[q];
      if (!pool_dirty[q]) {
        pool_dirty[q] = 1;
        dirty_pools.push_back(q);
      }
    }
  }
  for (std::int32_t k = node.succ_begin; k < node.succ_end; ++k) {
    const std::int32_t s = succ[k];
    __builtin_prefetch(&nodes[s]);  // read by start(s) once s is ready
    if (--npred[s] == 0) ready_now.push_back(s);
  }
}

RunResult Engine::Impl::run() {
  const std::size_t nr = g->num_resources();
  r = RunResult{};
  r.tasks.assign(n, TaskTiming{});
  r.resources.assign(nr, ResourceUsage{});
  npred.resize(n);
  for (std::int32_t t = 0; t < n; ++t) npred[t] = nodes[t].npred0;
  events.clear();
  links.reset();
  memory.reset();
  std::fill(active.begin(), active.end(), 0);
  std::fill(since.begin(), since.end(), 0);
  for (std::size_t i = 0; i < nr; ++i) {
    free_slots[i] = slots[i];
    fifo[i].clear();
    fifo_head[i] = 0;
    pool_dirty[i] = 0;
  }
  dirty_pools.clear();
  ready_now.clear();

  for (std::int32_t t = 0; t < n; ++t)
    if (npred[t] == 0) ready_now.push_back(t);
  std::uint64_t processed = 0, stale = 0;
  Time now = 0;
  // Each instant: handle its events; then start the tasks that became ready;
  // then recompute link rates once for the transfers that started or ended.
  // Any of these may add events at the same instant: repeat until none is left.
  for (;;) {
    if (events.empty() || events.top_time() > now) {
      if (!ready_now.empty() || !dirty_pools.empty()) {
        start_ready(now);
        continue;
      }
      if (links.pending()) {
        links.update(now);
        schedule_changed_flows();
        continue;
      }
      if (events.empty()) break;
    }
    const Event e = events.pop();
    now = e.time;
    switch (e.kind) {
      case EventKind::TaskEnd:
        end(e.id, e.time);
        break;
      case EventKind::TransferBegin:
        begin_transfer(e.id, e.time);
        break;
      case EventKind::FlowDone:
        if (links.token(e.id) != e.seq) {
          ++stale;
          continue;
        }
        flow_done(e.id, e.time);
        break;
    }
    ++processed;
  }
  r.events = processed;
  r.stale_events = stale;
  r.oom = memory.oom();
  r.pools = memory.take_pools();
  return std::move(r);
}

std::size_t Engine::Impl::state_bytes() const {
  std::size_t b = cap_bytes(nodes) + cap_bytes(transfers) + cap_bytes(xfer_links) +
                  cap_bytes(succ) + cap_bytes(mem) + cap_bytes(is_pool) +
                  cap_bytes(slots) + cap_bytes(npred) + events.state_bytes() +
                  links.state_bytes() + memory.state_bytes() + cap_bytes(active) +
                  cap_bytes(since) + cap_bytes(free_slots) + cap_bytes(fifo) +
                  cap_bytes(fifo_head) + cap_bytes(pool_dirty) + cap_bytes(dirty_pools) +
                  cap_bytes(ready_now) + cap_bytes(starting) + sizeof(Impl);
  for (const auto& f : fifo) b += cap_bytes(f);
  return b;
}

Engine::Engine(const TaskGraph& graph, CostFn cost)
    : impl_(std::make_unique<Impl>(graph, cost)) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

RunResult Engine::run() { return impl_->run(); }
const TaskGraph& Engine::graph() const { return *impl_->g; }
Time Engine::fixed_time(TaskId t) const { return impl_->nodes[static_cast<std::size_t>(t.index)].fixed; }
std::size_t Engine::state_bytes() const { return impl_->state_bytes(); }

RunResult simulate(const TaskGraph& graph, CostFn cost) {
  return Engine(graph, std::move(cost)).run();
}

}  // namespace strata::sim
