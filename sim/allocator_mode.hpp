#pragma once
// How PyTorch's CUDA caching allocator is configured
// (PYTORCH_CUDA_ALLOC_CONF; sim/caching_allocator.hpp models both), and what
// a replay through it finds.
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "sim/names.hpp"

namespace strata::sim {
// Native: segments from cudaMalloc, kept until released; ExpandableSegments
// (expandable_segments:True): one segment per pool whose mapped pages grow.
enum class AllocatorMode : std::uint8_t { Native, ExpandableSegments };

// What a replay through the allocator found (replay_allocator).
struct AllocatorReplay {
  std::int64_t reserved_peak = 0;   // bytes of segments (mapped pages) at their most
  std::int64_t allocated_peak = 0;  // the requests' live bytes at their highest
  int steps = 0;                    // steps replayed to the steady state
  std::int64_t segments_made = 0;   // cudaMalloc calls or page mappings
  std::int64_t releases = 0;        // cached segments released before a retry
  std::int64_t overflow = 0;        // bytes the first failed reservation lacked (0: none)
};
}  // namespace strata::sim

namespace strata {
template <>
struct EnumNames<sim::AllocatorMode> {
  static constexpr std::array<std::pair<sim::AllocatorMode, std::string_view>, 2> table{{
      {sim::AllocatorMode::Native, "native"},
      {sim::AllocatorMode::ExpandableSegments, "expandable_segments"},
  }};
};
}  // namespace strata
