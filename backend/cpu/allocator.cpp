#include "backend/cpu/allocator.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "sim/error.hpp"

namespace strata::backend::cpu {

ByteCounter::ByteCounter(Bytes capacity) : capacity_(capacity) {
  if (capacity < 0) throw Error("allocator: capacity must be >= 0");
}

void ByteCounter::add(Bytes bytes, MemTag tag) {
  if (bytes < 0) throw Error("allocate: negative size " + std::to_string(bytes));
  const auto t = static_cast<std::size_t>(tag);
  if (t >= sim::kMemTagCount) throw Error("allocate: unknown memory tag");
  std::lock_guard lock(mu_);
  if (capacity_ > 0 && s_.current_total + bytes > capacity_)
    throw OutOfMemory(bytes, s_.current_total, capacity_, tag);
  s_.add(bytes, tag);
}

void ByteCounter::remove(Bytes bytes, MemTag tag) noexcept {
  std::lock_guard lock(mu_);
  s_.remove(bytes, tag);
}

MemoryStats ByteCounter::stats() const {
  std::lock_guard lock(mu_);
  return s_;
}

void ByteCounter::reset_peaks() {
  std::lock_guard lock(mu_);
  s_.reset_peaks();
}

// Leaks are the owner's bug, not a reason to abort: the counts stay readable
// up to destruction and the storage itself is reclaimed with the process.
TrackingAllocator::~TrackingAllocator() = default;

void* TrackingAllocator::allocate(Bytes bytes, MemTag tag) {
  counts_.add(bytes, tag);
  // aligned_alloc wants a multiple of the alignment, and at least one.
  const auto rounded =
      (static_cast<std::size_t>(std::max<Bytes>(bytes, 1)) + kAlignment - 1) / kAlignment *
      kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    counts_.remove(bytes, tag);
    throw Error("allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void TrackingAllocator::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  std::free(p);
  counts_.remove(bytes, tag);
}

}  // namespace strata::backend::cpu
