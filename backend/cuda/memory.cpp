#include "backend/cuda/memory.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/device.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

std::string gib_text(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

namespace {

void check_tag(Bytes bytes, MemTag tag, const char* who) {
  if (bytes < 0) throw Error(std::string(who) + ": negative size " + std::to_string(bytes));
  if (static_cast<std::size_t>(tag) >= sim::kMemTagCount) throw Error(std::string(who) + ": unknown memory tag");
}

}  // namespace

// ---------------------------------------------------------------- device

DeviceAllocator::DeviceAllocator(int device, Bytes capacity) : device_(device), capacity_(capacity) {
  if (capacity < 0) throw Error("DeviceAllocator: capacity must be >= 0");
  STRATA_CUDA_CHECK(cudaSetDevice(device));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  STRATA_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
  // Keep what was reserved when streams synchronise (the default threshold
  // 0 hands it back to the device at every synchronisation).
  unsigned long long keep = ~0ULL;
  STRATA_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  // Memory freed on one stream is reused on another only once the free has
  // completed or an event already orders the two, never by making the
  // allocating stream wait (which would serialise compute behind an
  // offload copy); the pool grows instead, as PyTorch's allocator does.
  int no = 0;
  STRATA_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolReuseAllowInternalDependencies, &no));
}

DeviceAllocator::~DeviceAllocator() {
  // Outstanding allocations are the owner's bug; the pool frees its memory
  // once they are released (or with the process).
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
}

void* DeviceAllocator::allocate(Bytes bytes, MemTag tag) {
  check_tag(bytes, tag, "DeviceAllocator::allocate");
  {
    std::lock_guard lock(mu_);
    if (capacity_ > 0 && s_.current_total + bytes > capacity_) {
      const Bytes live = s_.current_total;
      throw OutOfMemory("DeviceAllocator: " + std::to_string(bytes) + " bytes (" +
                            std::string(enum_name(tag)) + ") exceed the capacity of " +
                            std::to_string(capacity_) + " bytes with " + std::to_string(live) +
                            " live",
                        bytes, live, capacity_ - live, capacity_);
    }
  }
  void* p = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&p, static_cast<std::size_t>(std::max<Bytes>(bytes, 1)),
                                                pool_, stream_);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
    const MemoryStats now = stats();
    throw OutOfMemory("device " + std::to_string(device_) + " is out of memory: allocating " + gib_text(bytes) +
                          " (" + std::string(enum_name(tag)) + ") with " + gib_text(now.current_total) +
                          " live in the tracking allocator (peak " + gib_text(now.peak_total) +
                          "); the device has " + gib_text(static_cast<Bytes>(free)) + " free of " +
                          gib_text(static_cast<Bytes>(total)),
                      bytes, now.current_total, static_cast<Bytes>(free), static_cast<Bytes>(total));
  }
  STRATA_CUDA_CHECK(e);
  std::lock_guard lock(mu_);
  s_.add(bytes, tag);
  return p;
}

void DeviceAllocator::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  if (p != nullptr && cudaFreeAsync(p, stream_) != cudaSuccess) cudaGetLastError();
  std::lock_guard lock(mu_);
  s_.remove(bytes, tag);
}

MemoryStats DeviceAllocator::stats() const {
  std::lock_guard lock(mu_);
  return s_;
}

void DeviceAllocator::reset_peaks() {
  {
    std::lock_guard lock(mu_);
    s_.reset_peaks();
  }
  unsigned long long zero = 0;  // the only value this attribute accepts: restart from now
  STRATA_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
}

Bytes DeviceAllocator::reserved_peak() const {
  unsigned long long v = 0;
  STRATA_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &v));
  return static_cast<Bytes>(v);
}

// ---------------------------------------------------------------- pinned host

PinnedHostPool::PinnedHostPool() = default;

PinnedHostPool::~PinnedHostPool() {
  for (auto& [p, ev] : events_) {
    cudaEventDestroy(ev);
    cudaFreeHost(p);
  }
}

Bytes PinnedHostPool::rounded(Bytes bytes) {
  // 4 KiB pages below 1 MiB, 1 MiB above: a step's sizes repeat exactly, so
  // blocks come back to the same requests.
  const Bytes unit = bytes < (Bytes{1} << 20) ? 4096 : (Bytes{1} << 20);
  return std::max<Bytes>(unit, (bytes + unit - 1) / unit * unit);
}

void* PinnedHostPool::allocate(Bytes bytes, MemTag tag) {
  check_tag(bytes, tag, "PinnedHostPool::allocate");
  const Bytes size = rounded(bytes);
  std::lock_guard lock(mu_);
  void* p = nullptr;
  if (auto it = free_.find(size); it != free_.end()) {
    // The stream that uses it next waits for the one that released it.
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream_, it->second.released, 0));
    p = it->second.p;
    cached_ -= size;
    free_.erase(it);
  } else {
    const cudaError_t e = cudaHostAlloc(&p, static_cast<std::size_t>(size), cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemory("pinned host memory exhausted: allocating " + gib_text(bytes) + " (" +
                            std::string(enum_name(tag)) + ") with " + gib_text(s_.current_total) +
                            " live and " + gib_text(cached_) + " cached in the pool",
                        bytes, s_.current_total, 0, 0);
    }
    STRATA_CUDA_CHECK(e);
    cudaEvent_t ev = nullptr;
    try {
      STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    } catch (...) {
      cudaFreeHost(p);
      throw;
    }
    events_[p] = ev;
  }
  s_.add(bytes, tag);
  return p;
}

void PinnedHostPool::deallocate(void* p, Bytes bytes, MemTag tag) noexcept {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  s_.remove(bytes, tag);
  const auto ev = events_.find(p);
  if (ev == events_.end()) return;  // not ours: nothing sensible to do in a noexcept release
  if (cudaEventRecord(ev->second, stream_) != cudaSuccess) {
    // Without the event the block cannot be reused safely: keep it out of
    // the free list (freed with the pool).
    cudaGetLastError();
    return;
  }
  free_.emplace(rounded(bytes), Block{p, ev->second});
  cached_ += rounded(bytes);
}

MemoryStats PinnedHostPool::stats() const {
  std::lock_guard lock(mu_);
  return s_;
}

void PinnedHostPool::reset_peaks() {
  std::lock_guard lock(mu_);
  s_.reset_peaks();
}

Bytes PinnedHostPool::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_;
}

}  // namespace strata::backend::cuda
