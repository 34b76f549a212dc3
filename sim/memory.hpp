#pragma once
// Live-bytes accounting of memory pools during a run: timeline, peak (with the
// time it is first reached and the breakdown by tag at that moment), and the
// first allocation that exceeds a pool's capacity. Exceeding capacity is a
// result, not an error: the run continues so the true peak is known.
#include <cstdint>
#include <optional>
#include <vector>

#include "sim/task_graph.hpp"
#include "sim/units.hpp"

namespace strata::sim {

// Live bytes of a pool from `time` on (the last change at that time).
struct MemPoint {
  Time time = 0;
  Bytes live = 0;
};

// One allocation (alloc) or free (!alloc) of a buffer, in the order the run
// applied them.
struct MemChange {
  Time time = 0;
  BufferId buffer;
  bool alloc = true;
};

struct PoolUsage {
  Bytes capacity = 0;
  Bytes peak = 0;         // highest live bytes
  Time peak_time = 0;     // first time the peak is reached
  TagBytes peak_by_tag{}; // breakdown at that moment
  Bytes end_live = 0;     // live bytes after the last task
  Bytes bytes_short = 0;  // max(0, peak - capacity)
  std::vector<MemPoint> timeline;   // one point per instant with a change (t = 0 first)
  std::vector<MemChange> changes;   // every alloc and free, for per-tag views
};

// Live bytes by tag of one pool over time, one point per instant of `usage`'s
// timeline (buffers live at start included), rebuilt from usage.changes.
struct TagPoint {
  Time time = 0;
  TagBytes by_tag{};
};
std::vector<TagPoint> tag_timeline(const TaskGraph& graph, PoolId pool, const PoolUsage& usage);

// The first allocation that did not fit.
struct OutOfMemory {
  std::optional<TaskId> task;      // whose start allocated it; absent when the
  std::optional<BufferId> buffer;  // buffers live at start alone do not fit
  PoolId pool;
  Time time = 0;
  Bytes capacity = 0;
  Bytes needed = 0;       // live bytes after the allocation
  Bytes bytes_short = 0;  // needed - capacity
};

class MemoryTracker {
 public:
  explicit MemoryTracker(const TaskGraph& graph);

  // Start of a run: buffers marked live_at_start become live at t = 0.
  void reset();
  void alloc(BufferId b, TaskId by, Time now);
  // Throws GraphError when the buffer is not live (freed before allocated).
  void free(BufferId b, TaskId by, Time now);

  const std::vector<PoolUsage>& pools() const { return pools_; }
  // End of a run: records each pool's final live bytes and hands the usage over.
  std::vector<PoolUsage> take_pools() {
    for (std::size_t p = 0; p < pools_.size(); ++p) pools_[p].end_live = live_bytes_[p];
    return std::move(pools_);
  }
  const std::optional<OutOfMemory>& oom() const { return oom_; }
  std::size_t state_bytes() const;

 private:
  void record(std::int32_t pool, Time now, BufferId b, bool alloc);

  const TaskGraph* graph_;
  // One 16-byte record per buffer: an alloc or free touches one cache line.
  struct BufferState {
    Bytes bytes = 0;
    std::int32_t pool = 0;
    std::uint8_t tag = 0;
    std::uint8_t live = 0;
  };
  std::vector<BufferState> bufs_;
  std::vector<std::size_t> changes_per_pool_;  // allocs + frees in the graph
  std::vector<Bytes> live_bytes_;
  std::vector<TagBytes> live_by_tag_;
  std::vector<PoolUsage> pools_;
  std::optional<OutOfMemory> oom_;
};

}  // namespace strata::sim
