#pragma once
// A device tensor whose element type is chosen at run time (fp32 or bf16):
// the activations of GptModel, fp32 in an fp32 plan and bf16 in a bf16 one,
// so the executor holds, offloads and frees them without knowing the
// precision. The storage rules are BasicDeviceTensor's (move-only, tagged,
// stream-ordered, zero-filled unless asked not to); `as<T>()` hands out a
// typed pointer and throws when T is not the tensor's type. Internal to
// backend/cuda.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/bf16_math.hpp"
#include "backend/cuda/tensor.hpp"

namespace strata::backend::cuda {

enum class DType { F32, BF16 };

constexpr Bytes dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }
constexpr const char* dtype_name(DType t) { return t == DType::F32 ? "fp32" : "bf16"; }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<Bf16>() {
  return DType::BF16;
}

class ActTensor {
 public:
  ActTensor() = default;
  ActTensor(DeviceAllocator& alloc, Shape shape, DType dtype, MemTag tag, Fill fill = Fill::Zero)
      : alloc_(&alloc), shape_(shape), dtype_(dtype), tag_(tag) {
    data_ = alloc.allocate(bytes_of(shape, dtype), tag);
    if (fill == Fill::Zero) zero();
  }
  ~ActTensor() { release(); }
  ActTensor(const ActTensor&) = delete;
  ActTensor& operator=(const ActTensor&) = delete;
  ActTensor(ActTensor&& o) noexcept { swap(o); }
  ActTensor& operator=(ActTensor&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }

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
  Bytes bytes() const { return data_ ? bytes_of(shape_, dtype_) : 0; }
  DType dtype() const { return dtype_; }
  MemTag tag() const { return tag_; }
  // The raw storage (copies); as<T>() for kernels.
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <class T>
  T* as() {
    check<T>();
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    check<T>();
    return static_cast<const T*>(data_);
  }

  void zero() {
    if (data_ != nullptr)
      STRATA_CUDA_CHECK(cudaMemsetAsync(data_, 0, static_cast<std::size_t>(bytes()), alloc_->stream()));
  }
  ActTensor clone(MemTag tag) const {
    ActTensor t(*alloc_, shape_, dtype_, tag, Fill::Uninitialised);
    STRATA_CUDA_CHECK(cudaMemcpyAsync(t.data_, data_, static_cast<std::size_t>(bytes()), cudaMemcpyDeviceToDevice,
                                      alloc_->stream()));
    return t;
  }

 private:
  static Bytes bytes_of(const Shape& s, DType t) { return s.numel() * dtype_bytes(t); }
  template <class T>
  void check() const {
    if (data_ != nullptr && dtype_of<T>() != dtype_)
      throw Error(std::string("device tensor ") + shape_.str() + " holds " + dtype_name(dtype_) + ", read as " +
                  dtype_name(dtype_of<T>()));
  }
  void swap(ActTensor& o) noexcept {
    std::swap(alloc_, o.alloc_);
    std::swap(data_, o.data_);
    std::swap(shape_, o.shape_);
    std::swap(dtype_, o.dtype_);
    std::swap(tag_, o.tag_);
  }

  DeviceAllocator* alloc_ = nullptr;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  MemTag tag_ = MemTag::Other;
};

}  // namespace strata::backend::cuda
