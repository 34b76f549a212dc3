#pragma once
// Device and pinned host memory with byte counts by tag, as the CPU
// backend's TrackingAllocator keeps them (backend/common/memory_stats.hpp's
// MemoryStats), so measured bytes compare with the simulator's tag by tag.
// Internal to backend/cuda (it names CUDA types).
//
// Both allocators work on a current stream, which the executor sets to the
// stream of the task it is enqueuing: an allocation becomes usable in that
// stream's order and a release happens in it, so a buffer is freed after
// the work the task enqueued on it, without synchronising the device.
//
// - DeviceAllocator: a CUDA memory pool of its own (cudaMallocFromPoolAsync /
//   cudaFreeAsync; cudaFree would synchronise the whole device at every
//   release) that keeps what it reserved between steps, as PyTorch's caching
//   allocator does; memory freed on one stream is not handed to another by
//   making it wait. The counts are the bytes asked for, at the moment they
//   are asked for and given back (the host enqueues in program order, so
//   this is the order the compute stream runs them in). Reserved bytes (what
//   the pool took from the device, rounding and reuse included) are
//   reported beside them. Out of memory throws cuda::OutOfMemory with the
//   request, the live bytes and the device's free and total bytes.
// - PinnedHostPool: page-locked host memory (cudaHostAlloc) for activation
//   offload, so copies run on the copy engines at full PCIe speed and
//   asynchronously. Freed blocks are kept by size and reused (pinning is a
//   slow system call); a block is handed out again only in the order of the
//   stream that last used it (an event recorded at the release, waited on
//   by the next user's stream), so a copy still reading it cannot be
//   overwritten.
//
// Single-threaded use per allocator (the executor's host thread); the
// counts are guarded anyway so stats() may be read from another thread.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/common/memory_stats.hpp"

namespace strata::backend::cuda {

using sim::MemTag;

// "1.50 GiB": how the backend's messages give sizes.
std::string gib_text(Bytes b);

class DeviceAllocator {
 public:
  // On device `device` (made current by the constructor). capacity > 0
  // refuses allocations beyond it with OutOfMemory (tests).
  explicit DeviceAllocator(int device, Bytes capacity = 0);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // `bytes` (256-byte aligned; 0 gives a unique pointer) on the current stream.
  void* allocate(Bytes bytes, MemTag tag);
  // Gives back what allocate(bytes, tag) returned, on the current stream.
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept;

  void set_stream(cudaStream_t s) { stream_ = s; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

  MemoryStats stats() const;
  void reset_peaks();  // also the pool's reserved high-water mark
  // The most bytes the pool held from the device since the last
  // reset_peaks() (>= the peak of live bytes: rounding, reuse across streams).
  Bytes reserved_peak() const;

 private:
  int device_;
  Bytes capacity_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the legacy default stream until set
  mutable std::mutex mu_;
  MemoryStats s_;
};

class PinnedHostPool {
 public:
  PinnedHostPool();
  ~PinnedHostPool();  // frees every block (call when no copy uses them)
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // Page-locked, 4 KiB-aligned, usable by work on the current stream.
  void* allocate(Bytes bytes, MemTag tag);
  // Back to the pool; reusable after what the current stream has enqueued.
  void deallocate(void* p, Bytes bytes, MemTag tag) noexcept;

  void set_stream(cudaStream_t s) { stream_ = s; }
  MemoryStats stats() const;
  void reset_peaks();
  Bytes cached_bytes() const;  // held by the pool, free for reuse

 private:
  struct Block {
    void* p = nullptr;
    cudaEvent_t released = nullptr;  // recorded on the stream that last used it
  };
  static Bytes rounded(Bytes bytes);
  cudaStream_t stream_ = nullptr;
  mutable std::mutex mu_;
  std::multimap<Bytes, Block> free_;  // by rounded size
  std::map<void*, cudaEvent_t> events_;  // every block's event, live or free
  Bytes cached_ = 0;
  MemoryStats s_;
};

}  // namespace strata::backend::cuda
