#include "sim/memory.hpp"

#include <algorithm>

namespace strata::sim {

MemoryTracker::MemoryTracker(const TaskGraph& graph) : graph_(&graph) {
  bufs_.reserve(graph.num_buffers());
  for (const Buffer& b : graph.buffers())
    bufs_.push_back({b.bytes, b.pool.index, static_cast<std::uint8_t>(b.tag), 0});
  // Every alloc and free of a run is known up front: size the logs once.
  changes_per_pool_.assign(graph.num_pools(), 0);
  for (const Task& t : graph.tasks()) {
    for (BufferId b : t.allocs) ++changes_per_pool_[bufs_[b.index].pool];
    for (BufferId b : t.frees) ++changes_per_pool_[bufs_[b.index].pool];
  }
}

void MemoryTracker::reset() {
  const std::size_t np = graph_->num_pools();
  live_bytes_.assign(np, 0);
  live_by_tag_.assign(np, TagBytes{});
  pools_.assign(np, PoolUsage{});
  oom_.reset();
  for (std::size_t p = 0; p < np; ++p) {
    pools_[p].capacity = graph_->pools()[p].capacity;
    pools_[p].changes.reserve(changes_per_pool_[p]);
    pools_[p].timeline.reserve(changes_per_pool_[p] + 1);
  }
  for (std::size_t b = 0; b < bufs_.size(); ++b) {
    BufferState& st = bufs_[b];
    st.live = graph_->buffers()[b].live_at_start ? 1 : 0;
    if (!st.live) continue;
    live_bytes_[st.pool] += st.bytes;
    live_by_tag_[st.pool][st.tag] += st.bytes;
  }
  for (std::size_t p = 0; p < np; ++p) {
    PoolUsage& u = pools_[p];
    u.peak = live_bytes_[p];
    u.peak_by_tag = live_by_tag_[p];
    u.timeline.push_back({0, live_bytes_[p]});
    u.bytes_short = std::max<Bytes>(0, u.peak - u.capacity);
    if (u.peak > u.capacity && !oom_) {
      // Resident buffers alone do not fit: no task to blame.
      oom_ = OutOfMemory{std::nullopt, std::nullopt, PoolId{static_cast<std::int32_t>(p)}, 0,
                         u.capacity, u.peak, u.peak - u.capacity};
    }
  }
}

void MemoryTracker::record(std::int32_t p, Time now, BufferId b, bool alloc) {
  PoolUsage& u = pools_[p];
  const Bytes live = live_bytes_[p];
  if (!u.timeline.empty() && u.timeline.back().time == now)
    u.timeline.back().live = live;
  else
    u.timeline.push_back({now, live});
  u.changes.push_back({now, b, alloc});
}

void MemoryTracker::alloc(BufferId b, TaskId by, Time now) {
  BufferState& st = bufs_[b.index];
  const std::int32_t p = st.pool;
  const Bytes bytes = st.bytes;
  st.live = 1;
  live_bytes_[p] += bytes;
  live_by_tag_[p][st.tag] += bytes;
  PoolUsage& u = pools_[p];
  const Bytes live = live_bytes_[p];
  if (live > u.capacity && !oom_)
    oom_ = OutOfMemory{by, b, PoolId{p}, now, u.capacity, live, live - u.capacity};
  if (live > u.capacity) u.bytes_short = std::max(u.bytes_short, live - u.capacity);
  if (live > u.peak) {
    u.peak = live;
    u.peak_time = now;
    u.peak_by_tag = live_by_tag_[p];
  }
  record(p, now, b, true);
}

void MemoryTracker::free(BufferId b, TaskId by, Time now) {
  BufferState& st = bufs_[b.index];
  if (!st.live)
    throw GraphError("task '" + graph_->at(by).id + "' frees buffer '" + graph_->at(b).id +
                     "' at t=" + std::to_string(now) +
                     " ns, but it is not live (its allocating task has not started; add a "
                     "dependency from the allocating task)");
  const std::int32_t p = st.pool;
  const Bytes bytes = st.bytes;
  st.live = 0;
  live_bytes_[p] -= bytes;
  live_by_tag_[p][st.tag] -= bytes;
  record(p, now, b, false);
}

std::size_t MemoryTracker::state_bytes() const {
  std::size_t b = changes_per_pool_.capacity() * sizeof(std::size_t) +
                  bufs_.capacity() * sizeof(BufferState) + live_bytes_.capacity() * 8 +
                  live_by_tag_.capacity() * sizeof(TagBytes) + pools_.capacity() * sizeof(PoolUsage);
  for (const auto& u : pools_)
    b += u.timeline.capacity() * sizeof(MemPoint) + u.changes.capacity() * sizeof(MemChange);
  return b;
}

std::vector<TagPoint> tag_timeline(const TaskGraph& graph, PoolId pool, const PoolUsage& usage) {
  std::vector<TagPoint> out;
  TagBytes live{};
  for (const Buffer& b : graph.buffers())
    if (b.live_at_start && b.pool == pool) live[static_cast<std::size_t>(b.tag)] += b.bytes;
  out.push_back({0, live});
  for (const MemChange& c : usage.changes) {
    const Buffer& b = graph.at(c.buffer);
    live[static_cast<std::size_t>(b.tag)] += c.alloc ? b.bytes : -b.bytes;
    if (out.back().time == c.time)
      out.back().by_tag = live;
    else
      out.push_back({c.time, live});
  }
  return out;
}

}  // namespace strata::sim
