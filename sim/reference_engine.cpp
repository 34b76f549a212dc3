#include "sim/reference_engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "sim/bandwidth.hpp"
#include "sim/memory.hpp"

namespace strata::sim {

ReferenceEngine::ReferenceEngine(const TaskGraph& graph, CostFn cost) : graph_(&graph) {
  graph.validate();
  for (const Task& t : graph.tasks()) fixed_.push_back(resolve_fixed_time(t, cost));
}

namespace {

enum class State { Waiting, Queued, Fixed, Flowing, Tail, Done };

bool is_stream_like(ResourceKind k) {
  return k == ResourceKind::Stream || k == ResourceKind::CopyEngine;
}

struct Run {
  const TaskGraph& g;
  const std::vector<Time>& fixed;
  const std::size_t n, nr;
  RunResult r;
  MemoryTracker memory;
  Time now = 0;

  // Per task.
  std::vector<State> state;
  std::vector<int> unmet;               // explicit dependencies not yet ended
  std::vector<std::vector<int>> succs;  // explicit dependencies only
  std::vector<int> queue;               // stream / copy engine / pool, or -1
  std::vector<std::vector<std::int32_t>> task_links;
  std::vector<Time> phase_end;          // Fixed and Tail
  std::vector<double> remaining, rate;  // Flowing
  std::vector<Time> last, finish;
  std::vector<bool> fresh;
  // Per resource.
  std::vector<std::vector<int>> stream_tasks;  // enqueue order
  std::vector<std::size_t> head;
  std::vector<int> free_slots;
  std::vector<std::deque<int>> fifo;
  std::vector<int> active;
  std::vector<Time> since;
  std::vector<double> capacity;
  bool rates_dirty = false;

  Run(const TaskGraph& graph, const std::vector<Time>& fixed_time)
      : g(graph), fixed(fixed_time), n(graph.num_tasks()), nr(graph.num_resources()),
        memory(graph) {
    state.assign(n, State::Waiting);
    unmet.assign(n, 0);
    succs.resize(n);
    queue.assign(n, -1);
    task_links.resize(n);
    phase_end.assign(n, 0);
    remaining.assign(n, 0);
    rate.assign(n, 0);
    last.assign(n, 0);
    finish.assign(n, 0);
    fresh.assign(n, false);
    stream_tasks.resize(nr);
    head.assign(nr, 0);
    free_slots.assign(nr, 0);
    fifo.resize(nr);
    active.assign(nr, 0);
    since.assign(nr, 0);
    for (const Resource& res : g.resources()) {
      capacity.push_back(res.kind == ResourceKind::Link ? res.bytes_per_ns() : 1.0);
      free_slots[capacity.size() - 1] = res.slots;
    }
    g.for_each_edge([&](TaskId from, TaskId to, EdgeKind kind) {
      if (kind != EdgeKind::Dependency) return;
      succs[from.index].push_back(to.index);
      ++unmet[to.index];
    });
    for (std::size_t t = 0; t < n; ++t)
      for (ResourceId res : g.tasks()[t].resources) {
        if (g.at(res).kind == ResourceKind::Link) {
          task_links[t].push_back(res.index);
        } else {
          queue[t] = res.index;
          if (is_stream_like(g.at(res).kind)) stream_tasks[res.index].push_back(static_cast<int>(t));
        }
      }
    r.tasks.assign(n, TaskTiming{});
    r.resources.assign(nr, ResourceUsage{});
    memory.reset();
  }

  void acquire(int res) {
    if (active[res]++ == 0) since[res] = now;
  }
  void release(int res) {
    if (--active[res] == 0) r.resources[res].busy += now - since[res];
  }

  bool eligible(std::size_t t) const {
    if (state[t] != State::Waiting || unmet[t] != 0) return false;
    const int q = queue[t];
    if (q < 0 || !is_stream_like(g.resources()[q].kind)) return true;
    return head[q] < stream_tasks[q].size() && stream_tasks[q][head[q]] == static_cast<int>(t);
  }

  void start(std::size_t t) {
    r.tasks[t].start = now;
    if (queue[t] >= 0) {
      acquire(queue[t]);
      ++r.resources[queue[t]].tasks;
    }
    for (BufferId b : g.tasks()[t].allocs) memory.alloc(b, TaskId{static_cast<int>(t)}, now);
    state[t] = State::Fixed;
    phase_end[t] = now + fixed[t];
  }

  void end(std::size_t t) {
    state[t] = State::Done;
    r.tasks[t].end = now;
    r.makespan = std::max(r.makespan, now);
    for (BufferId b : g.tasks()[t].frees) memory.free(b, TaskId{static_cast<int>(t)}, now);
    const int q = queue[t];
    if (q >= 0) {
      release(q);
      if (is_stream_like(g.resources()[q].kind)) ++head[q];
      if (g.resources()[q].kind == ResourceKind::WorkerPool) ++free_slots[q];
    }
    for (int s : succs[t]) --unmet[s];
  }

  void to_tail(std::size_t t) {
    state[t] = State::Tail;
    phase_end[t] = now + g.tasks()[t].latency_after;
  }

  void after_fixed(std::size_t t) {
    const Task& task = g.tasks()[t];
    const bool transfer = !task_links[t].empty() || task.latency_after > 0;
    if (!transfer) {
      end(t);
    } else if (task.transfer_bytes > 0) {
      state[t] = State::Flowing;
      remaining[t] = static_cast<double>(task.transfer_bytes);
      rate[t] = 0;
      last[t] = now;
      fresh[t] = true;
      for (int l : task_links[t]) {
        acquire(l);
        ++r.resources[l].tasks;
      }
      rates_dirty = true;
    } else {
      to_tail(t);
    }
  }

  void flow_done(std::size_t t) {
    for (int l : task_links[t]) {
      release(l);
      r.resources[l].bytes += g.tasks()[t].transfer_bytes;
    }
    rates_dirty = true;
    if (g.tasks()[t].latency_after > 0)
      to_tail(t);
    else
      end(t);
  }

  // Completes every phase due now; returns whether anything happened.
  bool complete_due() {
    bool any = false;
    for (bool again = true; again;) {
      again = false;
      for (std::size_t t = 0; t < n; ++t) {
        if (state[t] == State::Fixed && phase_end[t] == now) {
          after_fixed(t);
        } else if (state[t] == State::Flowing && !fresh[t] && finish[t] == now) {
          flow_done(t);
        } else if (state[t] == State::Tail && phase_end[t] == now) {
          end(t);
        } else {
          continue;
        }
        again = any = true;
      }
    }
    return any;
  }

  // Starts eligible tasks in task order, then serves worker pools in pool order.
  bool start_eligible() {
    bool any = false;
    std::vector<std::size_t> ready;
    for (std::size_t t = 0; t < n; ++t)
      if (eligible(t)) ready.push_back(t);
    for (std::size_t t : ready) {
      any = true;
      const int q = queue[t];
      if (q >= 0 && g.resources()[q].kind == ResourceKind::WorkerPool) {
        state[t] = State::Queued;
        fifo[q].push_back(static_cast<int>(t));
      } else {
        start(t);
      }
    }
    for (std::size_t q = 0; q < nr; ++q)
      while (free_slots[q] > 0 && !fifo[q].empty()) {
        --free_slots[q];
        start(static_cast<std::size_t>(fifo[q].front()));
        fifo[q].pop_front();
        any = true;
      }
    return any;
  }

  // Max-min rates of every flowing transfer, from scratch.
  void update_rates() {
    rates_dirty = false;
    std::vector<std::size_t> flowing;
    std::vector<std::vector<std::int32_t>> paths;
    for (std::size_t t = 0; t < n; ++t)
      if (state[t] == State::Flowing) {
        flowing.push_back(t);
        paths.push_back(task_links[t]);
      }
    if (flowing.empty()) return;
    const std::vector<double> rates = max_min_rates(capacity, paths);
    for (std::size_t i = 0; i < flowing.size(); ++i) {
      const std::size_t t = flowing[i];
      if (!fresh[t] && rates[i] == rate[t]) continue;
      if (!fresh[t])
        remaining[t] = std::max(0.0, remaining[t] - rate[t] * static_cast<double>(now - last[t]));
      fresh[t] = false;
      last[t] = now;
      rate[t] = rates[i];
      const double dt = std::ceil(remaining[t] / rate[t] - 1e-6);
      finish[t] = last[t] + std::max<Time>(0, static_cast<Time>(dt));
    }
  }

  std::optional<Time> next_instant() const {
    std::optional<Time> next;
    auto consider = [&](Time x) {
      if (!next || x < *next) next = x;
    };
    for (std::size_t t = 0; t < n; ++t) {
      if (state[t] == State::Fixed || state[t] == State::Tail) consider(phase_end[t]);
      if (state[t] == State::Flowing) consider(finish[t]);
    }
    return next;
  }

  RunResult go() {
    for (;;) {
      for (;;) {  // rounds within the instant
        if (complete_due()) continue;
        if (start_eligible()) continue;
        if (rates_dirty) {
          update_rates();
          continue;
        }
        break;
      }
      const std::optional<Time> next = next_instant();
      if (!next) break;
      now = *next;
    }
    r.oom = memory.oom();
    r.pools = memory.take_pools();
    return std::move(r);
  }
};

}  // namespace

RunResult ReferenceEngine::run() { return Run(*graph_, fixed_).go(); }

}  // namespace strata::sim
