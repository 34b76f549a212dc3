#pragma once
// Live and peak bytes of one memory pool by the simulator's memory tags: what
// every backend's allocators count (the CPU backend's TrackingAllocator, the
// CUDA backend's DeviceAllocator) and what a step's results carry, so
// measured bytes are compared with the predicted ones tag by tag.
#include <cstdint>

#include "sim/task_graph.hpp"
#include "sim/units.hpp"

namespace strata::backend {

using sim::MemTag;
using sim::TagBytes;

struct MemoryStats {
  TagBytes current{};       // live bytes by tag
  TagBytes peak{};          // the largest live bytes each tag reached
  Bytes current_total = 0;  // live bytes, all tags
  Bytes peak_total = 0;     // the largest live bytes, all tags at once
  std::int64_t allocations = 0;  // allocate calls so far

  // Counts `bytes` becoming live under `tag` (an allocation), or dying.
  void add(Bytes bytes, MemTag tag) {
    const auto t = static_cast<std::size_t>(tag);
    current[t] += bytes;
    peak[t] = current[t] > peak[t] ? current[t] : peak[t];
    current_total += bytes;
    peak_total = current_total > peak_total ? current_total : peak_total;
    ++allocations;
  }
  void remove(Bytes bytes, MemTag tag) {
    current[static_cast<std::size_t>(tag)] -= bytes;
    current_total -= bytes;
  }
  // Peaks restart from the live bytes (to measure one phase of a run).
  void reset_peaks() {
    peak = current;
    peak_total = current_total;
  }
};

}  // namespace strata::backend
