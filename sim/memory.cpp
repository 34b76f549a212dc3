#include "sim/memory.hpp"

#include <algorithm>

namespace strata::sim {

MemoryTracker::MemoryTracker(const TaskGraph& graph) : graph_(&graph) {
  const auto& bufs = graph.buffers();
  buf_pool_.reserve(bufs.size());
  buf_bytes_.reserve(bufs.size());
  buf_tag_.reserve(bufs.size());
  for (const Buffer& b : bufs) {
    buf_pool_.push_back(b.pool.index);
    buf_bytes_.push_back(b.bytes);
    buf_tag_.push_back(static_cast<std::uint8_t>(b.tag));
  }
}

void MemoryTracker::reset() {
  const std::size_t np = graph_->num_pools();
  live_.assign(buf_pool_.size(), 0);
  live_bytes_.assign(np, 0);
  live_by_tag_.assign(np, TagBytes{});
  pools_.assign(np, PoolUsage{});
  oom_.reset();
  for (std::size_t p = 0; p < np; ++p) pools_[p].capacity = graph_->pools()[p].capacity;
  for (std::size_t b = 0; b < buf_pool_.size(); ++b) {
    if (!graph_->buffers()[b].live_at_start) continue;
    live_[b] = 1;
    live_bytes_[buf_pool_[b]] += buf_bytes_[b];
    live_by_tag_[buf_pool_[b]][buf_tag_[b]] += buf_bytes_[b];
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
  const std::int32_t p = buf_pool_[b.index];
  const Bytes bytes = buf_bytes_[b.index];
  live_[b.index] = 1;
  live_bytes_[p] += bytes;
  live_by_tag_[p][buf_tag_[b.index]] += bytes;
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
  if (!live_[b.index])
    throw GraphError("task '" + graph_->at(by).id + "' frees buffer '" + graph_->at(b).id +
                     "' at t=" + std::to_string(now) +
                     " ns, but it is not live (its allocating task has not started; add a "
                     "dependency from the allocating task)");
  const std::int32_t p = buf_pool_[b.index];
  const Bytes bytes = buf_bytes_[b.index];
  live_[b.index] = 0;
  live_bytes_[p] -= bytes;
  live_by_tag_[p][buf_tag_[b.index]] -= bytes;
  record(p, now, b, false);
}

std::size_t MemoryTracker::state_bytes() const {
  std::size_t b = buf_pool_.capacity() * 4 + buf_bytes_.capacity() * 8 + buf_tag_.capacity() +
                  live_.capacity() + live_bytes_.capacity() * 8 +
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
