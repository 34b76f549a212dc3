#pragma once
// Every buffer the CPU backend touches comes from an Allocator, tagged with
// the simulator's memory tags, so measured bytes can be compared with the
// predicted ones tag by tag. The executor will hold one allocator per rank
// pool and one for the host.
#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/common/memory_stats.hpp"
#include "backend/common/out_of_memory.hpp"
#include "sim/error.hpp"
#include "sim/task_graph.hpp"
#include "sim/units.hpp"

namespace strata::backend::cpu {

using sim::MemTag;
using sim::TagBytes;

// Alignment of every buffer (a cache line; enough for AVX-512 loads).
inline constexpr std::size_t kAlignment = 64;

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` of uninitialised storage aligned to kAlignment; throws Error when
  // it cannot. Zero bytes gives a valid, unique pointer.
  virtual void* allocate(Bytes bytes, MemTag tag) = 0;
  // Gives back what allocate(bytes, tag) returned, with the same size and tag.
  virtual void deallocate(void* p, Bytes bytes, MemTag tag) noexcept = 0;
};

// Live and peak byte counts of one pool, by tag and in total. Thread-safe.
// With a capacity, an allocation that would take the live total above it
// throws Error (a pool of fixed size).
class ByteCounter {
 public:
  explicit ByteCounter(Bytes capacity = 0);  // 0: unlimited
  void add(Bytes bytes, MemTag tag);          // throws: see above
  void remove(Bytes bytes, MemTag tag) noexcept;
  MemoryStats stats() const;
  void reset_peaks();

 private:
  Bytes capacity_;
  mutable std::mutex mu_;
  MemoryStats s_;
};

// Heap memory with byte counts: current and peak, by tag and in total.
// Thread-safe. With a capacity, an allocation that would take the live total
// above it throws Error (a pool of fixed size).
//
// Freed blocks are kept for the next allocation of the same rounded size
// (as PyTorch's caching allocator keeps device memory) and given back to the
// heap when the allocator is destroyed: a training step allocates and frees
// the same buffers every microbatch, and handing large blocks back to the
// operating system each time (glibc unmaps blocks above its mmap threshold)
// made each reuse pay system calls and page faults inside whichever task
// freed or touched it (docs/performance.md: 0.81× the wall time of 200
// pipeline steps, a seventh of the system time). The counts are of live bytes,
// cached blocks not included. Under AddressSanitizer every block is freed at
// once, so a use after free is still caught.
class TrackingAllocator final : public Allocator {
 public:
  explicit TrackingAllocator(Bytes capacity = 0) : counts_(capacity) {}  // 0: unlimited
  ~TrackingAllocator() override;
  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  void* allocate(Bytes bytes, MemTag tag) override;
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept override;

  // Whether freed blocks are kept for reuse (not under AddressSanitizer).
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kCachesBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  static constexpr bool kCachesBlocks = false;
#else
  static constexpr bool kCachesBlocks = true;
#endif
#else
  static constexpr bool kCachesBlocks = true;
#endif

  MemoryStats stats() const { return counts_.stats(); }
  // Peaks restart from the live bytes (to measure one phase of a run).
  void reset_peaks() { counts_.reset_peaks(); }

 private:
  ByteCounter counts_;
  std::mutex cache_mu_;
  std::unordered_map<std::size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
  std::atomic<std::size_t> next_offset_{0};  // the next large block's place in its page
};

}  // namespace strata::backend::cpu
