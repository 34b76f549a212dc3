#pragma once
// A dense row-major tensor in device memory, owning its storage, which comes
// from a DeviceAllocator under a memory tag (the CPU backend's BasicTensor,
// on the GPU). Move-only: a buffer has one owner, so the allocator's counts
// are the bytes really live. Allocation, zero-fill and release are enqueued
// on the allocator's current stream. Internal to backend/cuda.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/common/shape.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/memory.hpp"

namespace strata::backend::cuda {

// Zero: the storage is zero-filled (cudaMemsetAsync). Uninitialised: the
// caller writes every element before reading any.
enum class Fill { Zero, Uninitialised };

template <class T>
class BasicDeviceTensor {
 public:
  BasicDeviceTensor() = default;
  BasicDeviceTensor(DeviceAllocator& alloc, Shape shape, MemTag tag, Fill fill = Fill::Zero)
      : alloc_(&alloc), shape_(shape), tag_(tag) {
    data_ = static_cast<T*>(alloc.allocate(bytes_of(shape), tag));
    if (fill == Fill::Zero) zero();
  }
  ~BasicDeviceTensor() { release(); }
  BasicDeviceTensor(const BasicDeviceTensor&) = delete;
  BasicDeviceTensor& operator=(const BasicDeviceTensor&) = delete;
  BasicDeviceTensor(BasicDeviceTensor&& o) noexcept { swap(o); }
  BasicDeviceTensor& operator=(BasicDeviceTensor&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }

  // Gives the storage back now (on the allocator's current stream).
  void release() noexcept {
    if (alloc_ != nullptr && data_ != nullptr) alloc_->deallocate(data_, bytes(), tag_);
    data_ = nullptr;
    alloc_ = nullptr;
    shape_ = {};
  }

  bool empty() const { return data_ == nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_[i]; }
  std::int64_t numel() const { return data_ ? shape_.numel() : 0; }
  Bytes bytes() const { return data_ ? bytes_of(shape_) : 0; }
  MemTag tag() const { return tag_; }
  T* data() { return data_; }
  const T* data() const { return data_; }

  void zero() {
    if (data_ != nullptr)
      STRATA_CUDA_CHECK(cudaMemsetAsync(data_, 0, static_cast<std::size_t>(bytes()), alloc_->stream()));
  }
  // Synchronous copies from and to the host (initialisation, tests, reading
  // results): they wait for the current stream's work first.
  void upload(std::span<const T> host) {
    check_size(host.size());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(data_, host.data(), static_cast<std::size_t>(bytes()),
                                      cudaMemcpyHostToDevice, alloc_->stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(alloc_->stream()));
  }
  std::vector<T> download() const {
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (out.empty()) return out;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out.data(), data_, static_cast<std::size_t>(bytes()),
                                      cudaMemcpyDeviceToHost, alloc_->stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(alloc_->stream()));
    return out;
  }
  // A new tensor with the same shape and contents (a device copy, enqueued).
  BasicDeviceTensor clone(MemTag tag) const {
    BasicDeviceTensor t(*alloc_, shape_, tag, Fill::Uninitialised);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(t.data_, data_, static_cast<std::size_t>(bytes()),
                                      cudaMemcpyDeviceToDevice, alloc_->stream()));
    return t;
  }

 private:
  static Bytes bytes_of(const Shape& s) { return s.numel() * static_cast<Bytes>(sizeof(T)); }
  void check_size(std::size_t n) const {
    if (static_cast<std::int64_t>(n) != numel())
      throw Error("device tensor " + shape_.str() + ": " + std::to_string(n) + " host elements given");
  }
  void swap(BasicDeviceTensor& o) noexcept {
    std::swap(alloc_, o.alloc_);
    std::swap(data_, o.data_);
    std::swap(shape_, o.shape_);
    std::swap(tag_, o.tag_);
  }

  DeviceAllocator* alloc_ = nullptr;
  T* data_ = nullptr;
  Shape shape_;
  MemTag tag_ = MemTag::Other;
};

using DeviceTensor = BasicDeviceTensor<float>;
using DeviceIndexTensor = BasicDeviceTensor<std::int32_t>;

}  // namespace strata::backend::cuda
