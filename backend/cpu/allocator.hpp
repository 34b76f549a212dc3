#pragma once
// Every buffer the CPU backend touches comes from an Allocator, tagged with
// the simulator's memory tags, so measured bytes can be compared with the
// predicted ones tag by tag. The executor will hold one allocator per rank
// pool and one for the host.
#include <cstddef>
#include <mutex>

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

// An allocation beyond a pool's capacity: the device running out of memory.
// `where` names the pool (e.g. "rank 3 (stage 1) device"), or is empty.
class OutOfMemory : public Error {
 public:
  OutOfMemory(Bytes requested, Bytes live, Bytes capacity, MemTag tag, std::string where = "");
  Bytes requested() const { return requested_; }
  Bytes live() const { return live_; }
  Bytes capacity() const { return capacity_; }
  MemTag tag() const { return tag_; }

 private:
  Bytes requested_, live_, capacity_;
  MemTag tag_;
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
class TrackingAllocator final : public Allocator {
 public:
  explicit TrackingAllocator(Bytes capacity = 0) : counts_(capacity) {}  // 0: unlimited
  ~TrackingAllocator() override;
  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  void* allocate(Bytes bytes, MemTag tag) override;
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept override;

  MemoryStats stats() const { return counts_.stats(); }
  // Peaks restart from the live bytes (to measure one phase of a run).
  void reset_peaks() { counts_.reset_peaks(); }

 private:
  ByteCounter counts_;
};

}  // namespace strata::backend::cpu
