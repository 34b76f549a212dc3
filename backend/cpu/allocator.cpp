#include "backend/cpu/allocator.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "sim/error.hpp"

namespace strata::backend::cpu {

TrackingAllocator::TrackingAllocator(Bytes capacity) : capacity_(capacity) {
  if (capacity < 0) throw Error("TrackingAllocator: capacity must be >= 0");
}

// Leaks are the owner's bug, not a reason to abort: the counts stay readable
// up to destruction and the storage itself is reclaimed with the process.
TrackingAllocator::~TrackingAllocator() = default;

void* TrackingAllocator::allocate(Bytes bytes, MemTag tag) {
  if (bytes < 0) throw Error("allocate: negative size " + std::to_string(bytes));
  const auto t = static_cast<std::size_t>(tag);
  if (t >= sim::kMemTagCount) throw Error("allocate: unknown memory tag");
  {
    std::lock_guard lock(mu_);
    if (capacity_ > 0 && s_.current_total + bytes > capacity_)
      throw Error("allocate: " + std::to_string(bytes) + " bytes (" +
                  std::string(enum_name(tag)) + ") exceed the pool: " +
                  std::to_string(s_.current_total) + " of " + std::to_string(capacity_) +
                  " bytes live");
    s_.add(bytes, tag);
  }
  // aligned_alloc wants a multiple of the alignment, and at least one.
  const auto rounded =
      (static_cast<std::size_t>(std::max<Bytes>(bytes, 1)) + kAlignment - 1) / kAlignment *
      kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    deallocate(nullptr, bytes, tag);  // undo the counts
    throw Error("allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void TrackingAllocator::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  std::free(p);
  std::lock_guard lock(mu_);
  s_.remove(bytes, tag);
}

MemoryStats TrackingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return s_;
}

void TrackingAllocator::reset_peaks() {
  std::lock_guard lock(mu_);
  s_.reset_peaks();
}

}  // namespace strata::backend::cpu
