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

// Blocks of a page or more start at staggered offsets into their first page
// (kAlignment to kPage − kAlignment, in turn). glibc hands every large block
// (an mmap) out at one offset into a page, so a loop streaming several
// tensors at once — Adam reads four and writes three — would meet 4K
// aliasing: a load whose address matches an earlier store's in its low 12
// bits waits for that store. On this project's development machine Adam over
// four page-aligned arrays ran at 10.5 ns a parameter, 3.5 with the arrays
// 64 bytes apart (docs/performance.md). The block's start is kept in the
// word before the pointer handed out.
constexpr std::size_t kPage = 4096;
constexpr std::size_t kColors = kPage / kAlignment - 1;
bool staggered(std::size_t rounded) { return rounded >= kPage; }

void release(void* p, std::size_t rounded) {
  std::free(staggered(rounded) ? static_cast<void**>(p)[-1] : p);
}
}  // namespace

// Leaks are the owner's bug, not a reason to abort: the counts stay readable
// up to destruction and the storage itself is reclaimed with the process.
TrackingAllocator::~TrackingAllocator() {
  for (auto& [size, blocks] : cache_)
    for (void* p : blocks) release(p, size);
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
  const bool stagger = staggered(rounded);
  void* base = std::aligned_alloc(kAlignment, stagger ? rounded + kPage : rounded);
  if (base == nullptr) {
    counts_.remove(bytes, tag);
    throw Error("allocate: out of host memory for " + std::to_string(bytes) + " bytes");
  }
  if (!stagger) return base;
  const std::size_t offset = kAlignment * (1 + next_offset_.fetch_add(1, std::memory_order_relaxed) % kColors);
  void* p = static_cast<char*>(base) + offset;
  static_cast<void**>(p)[-1] = base;
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
  release(p, rounded_size(bytes));
}

}  // namespace strata::backend::cpu
