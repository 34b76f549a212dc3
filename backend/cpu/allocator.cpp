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

namespace {
// aligned_alloc wants a multiple of the alignment, and at least one.
std::size_t rounded_size(Bytes bytes) {
  return (static_cast<std::size_t>(std::max<Bytes>(bytes, 1)) + kAlignment - 1) / kAlignment * kAlignment;
}
}  // namespace

// Leaks are the owner's bug, not a reason to abort: the counts stay readable
// up to destruction and the storage itself is reclaimed with the process.
TrackingAllocator::~TrackingAllocator() {
  for (auto& [size, blocks] : cache_)
    for (void* p : blocks) std::free(p);
}

void* TrackingAllocator::allocate(Bytes bytes, MemTag tag) {
  counts_.add(bytes, tag);
  const std::size_t rounded = rounded_size(bytes);
  if (kCachesBlocks) {
    std::lock_guard lock(cache_mu_);
    if (const auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    counts_.remove(bytes, tag);
    throw Error("allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void TrackingAllocator::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  counts_.remove(bytes, tag);
  if (kCachesBlocks) {
    try {
      std::lock_guard lock(cache_mu_);
      cache_[rounded_size(bytes)].push_back(p);
      return;
    } catch (...) {  // no room to remember it: give it back
    }
  }
  std::free(p);
}

}  // namespace strata::backend::cpu
