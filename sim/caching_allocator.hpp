#pragma once
// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) as a
// model: the device memory a sequence of tensor allocations and frees
// reserves, so that what a framework holds (reserved) and what its tensors
// use (allocated) come apart the way they do on a GPU.
//
//   CachingAllocator a({.mode = AllocatorMode::Native, .limit = 80 * kGiB});
//   a.malloc(id, bytes);  a.free(id);  a.reserved_peak();
//
// What is modelled, with the source's constants:
// - Requests are rounded up to 512 B (kMinBlockSize). Up to 1 MiB
//   (kSmallSize) they come from the small pool, else from the large pool.
// - A request takes the smallest free cached block of its pool that holds
//   it, the lowest address among equal sizes (BlockComparatorSize: size,
//   then address). A larger block is split when the rest is at least 512 B
//   (small pool, or any pool with expandable segments) or more than 1 MiB
//   (large pool); otherwise the whole block serves the request.
// - Native segments: with no free block, cudaMalloc of 2 MiB (kSmallBuffer)
//   for a small request, 20 MiB (kLargeBuffer) for one under 10 MiB
//   (kMinLargeAlloc), else the size rounded up to 2 MiB (kRoundLarge).
//   Segments are never returned, except when a cudaMalloc would pass the
//   device's limit: then every cached segment with no block in use is freed
//   (release_cached_blocks) and the allocation retried.
// - Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True):
//   one segment per pool whose mapped part grows at its end in pages of
//   2 MiB (small pool) or 20 MiB (large pool) when no free block holds a
//   request, a free block at the end being extended rather than left.
//   Pages are not unmapped again (the source unmaps free pages only on
//   empty_cache or an allocation that would pass the limit; that case is
//   reported, not modelled).
// - A freed block merges with free neighbours of its segment.
// - Streams: a segment belongs to the stream whose allocation made it, and
//   its freed blocks serve only that stream's requests (the source keys its
//   pools' blocks by stream first); with expandable segments each stream has
//   its own.
// What is not: record_stream's deferred frees, max_split_size and
// garbage_collection_threshold (both off by default), and blocks held by
// CUDA graphs' private pools.
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/task_graph.hpp"

#include "sim/allocator_mode.hpp"
#include "sim/memory.hpp"
#include "sim/units.hpp"

namespace strata::sim {

struct AllocatorConfig {
  AllocatorMode mode = AllocatorMode::Native;
  // Device bytes the allocator may reserve (the GPU's memory less what is
  // held outside it): a native segment that would pass it first releases the
  // cached segments with nothing in use.
  Bytes limit = INT64_MAX;
};

// The source's constants (CUDACachingAllocator.cpp, kMinBlockSize …).
inline constexpr Bytes kAllocMinBlock = 512;
inline constexpr Bytes kAllocSmallSize = Bytes{1} << 20;
inline constexpr Bytes kAllocSmallBuffer = Bytes{2} << 20;
inline constexpr Bytes kAllocLargeBuffer = Bytes{20} << 20;
inline constexpr Bytes kAllocMinLargeAlloc = Bytes{10} << 20;
inline constexpr Bytes kAllocRoundLarge = Bytes{2} << 20;

// A request's size as the allocator rounds it (round_size).
Bytes allocator_round(Bytes bytes);
// A native segment's size for a rounded request (get_allocation_size).
Bytes allocator_segment(Bytes rounded);

class CachingAllocator {
 public:
  explicit CachingAllocator(AllocatorConfig config);

  // A tensor of `bytes` (> 0) under a caller's id that is not live,
  // allocated on `stream`.
  void malloc(std::int64_t id, Bytes bytes, std::int32_t stream = 0);
  // Frees a live id's block (throws std::logic_error for an id not live).
  void free(std::int64_t id);

  Bytes allocated() const { return allocated_; }  // requested bytes live
  Bytes reserved() const { return reserved_; }    // segments (mapped pages) held
  Bytes allocated_peak() const { return allocated_peak_; }
  Bytes reserved_peak() const { return reserved_peak_; }
  std::int64_t segments_made() const { return segments_made_; }  // cudaMalloc calls or page mappings
  std::int64_t releases() const { return releases_; }  // release_cached_blocks before a retry
  // The first reservation that passed the limit even after releasing (the
  // allocation would have failed); 0 when none did.
  Bytes overflow() const { return overflow_; }

 private:
  struct Block {
    std::int32_t segment = 0;
    Bytes address = 0, size = 0;
    std::int32_t prev = -1, next = -1;  // neighbours in the segment, by address
    bool free = true;
  };
  struct Segment {
    std::int32_t stream = 0;
    bool small = false;
    Bytes address = 0, size = 0;  // expandable: the mapped bytes
    std::int32_t first = -1, last = -1;
    bool live = true;
  };
  // A free block by (stream, size, address): the source's
  // BlockComparatorSize.
  using FreeKey = std::tuple<std::int32_t, Bytes, Bytes, std::int32_t>;

  std::set<FreeKey>& pool(bool small) { return small ? free_small_ : free_large_; }
  Block& at(std::int32_t b) { return blocks_[static_cast<std::size_t>(b)]; }
  // Makes `next` (−1: none) follow block b in its segment.
  void link(std::int32_t b, std::int32_t next);
  std::int32_t new_block(std::int32_t segment, Bytes address, Bytes size);
  std::int32_t take_free(std::int32_t stream, bool small, Bytes rounded);
  std::int32_t grow(std::int32_t stream, bool small, Bytes rounded);
  void reserve(Bytes bytes);
  void release_cached();
  void mark_free(std::int32_t b);
  void unmark_free(std::int32_t b);

  AllocatorConfig config_;
  std::vector<Block> blocks_;
  std::vector<std::int32_t> spare_;  // unused block slots
  std::vector<Segment> segments_;
  std::set<FreeKey> free_small_, free_large_;
  std::unordered_map<std::int64_t, std::pair<std::int32_t, Bytes>> live_;  // id → (block, bytes)
  std::map<std::pair<std::int32_t, bool>, std::int32_t> expandable_;  // (stream, small) → segment
  Bytes next_address_ = 0;
  Bytes allocated_ = 0, reserved_ = 0, allocated_peak_ = 0, reserved_peak_ = 0, overflow_ = 0;
  std::int64_t segments_made_ = 0, releases_ = 0;
};

// A pool's allocations and frees of a run replayed through the allocator:
// the buffers live at start first (in buffer order), then usage.changes in
// order, repeated as further steps (each begins with the buffers live at
// start, and only them, live) until a step reserves no more than the one
// before or `max_steps` have run, as a training loop's steady state does.
// Buffers tagged Runtime (outside the allocator) and empty ones are not
// requests. `tensors`, when given, splits a buffer into the tensors a
// framework allocates for it (an empty span: one tensor of its bytes): they
// are allocated in order and freed in reverse. A buffer is allocated on the
// stream of the task that allocates it (its first resource: the lane it
// runs on); the buffers live at start on stream 0.
AllocatorReplay replay_allocator(const TaskGraph& graph, PoolId pool, const PoolUsage& usage,
                                 AllocatorConfig config, int max_steps = 3,
                                 const std::function<std::span<const Bytes>(BufferId)>& tensors = {});

}  // namespace strata::sim
