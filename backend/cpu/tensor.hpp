#pragma once
// A dense row-major tensor owning its storage, which comes from an Allocator
// under a memory tag. Move-only: a buffer has exactly one owner, so the
// allocator's byte counts are the bytes really live.
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "backend/common/shape.hpp"
#include "backend/cpu/allocator.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {

using backend::Shape;

template <class T>
class BasicTensor {
 public:
  BasicTensor() = default;
  // Zero-filled storage for `shape` from `alloc`, counted under `tag`.
  BasicTensor(Allocator& alloc, Shape shape, MemTag tag)
      : alloc_(&alloc), shape_(shape), tag_(tag) {
    const Bytes n = shape.numel() * static_cast<Bytes>(sizeof(T));
    data_ = static_cast<T*>(alloc.allocate(n, tag));
    std::memset(data_, 0, static_cast<std::size_t>(n));
  }
  ~BasicTensor() { release(); }
  BasicTensor(const BasicTensor&) = delete;
  BasicTensor& operator=(const BasicTensor&) = delete;
  BasicTensor(BasicTensor&& o) noexcept { swap(o); }
  BasicTensor& operator=(BasicTensor&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }

  // Frees the storage now; the tensor becomes empty.
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
  // Bytes held: 0 for an empty (default, moved-from or released) tensor.
  Bytes bytes() const { return data_ ? shape_.numel() * static_cast<Bytes>(sizeof(T)) : 0; }
  MemTag tag() const { return tag_; }
  // Where the storage came from (null for an empty tensor).
  Allocator* allocator() const { return alloc_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::span<T> span() { return {data_, static_cast<std::size_t>(numel())}; }
  std::span<const T> span() const { return {data_, static_cast<std::size_t>(numel())}; }
  T& operator[](std::int64_t i) { return data_[i]; }
  const T& operator[](std::int64_t i) const { return data_[i]; }
  void zero() { std::memset(data_, 0, static_cast<std::size_t>(bytes())); }
  // A new tensor with the same shape and contents, from `alloc` under `tag`.
  BasicTensor clone(Allocator& alloc, MemTag tag) const {
    BasicTensor t(alloc, shape_, tag);
    std::memcpy(t.data_, data_, static_cast<std::size_t>(bytes()));
    return t;
  }

 private:
  void swap(BasicTensor& o) noexcept {
    std::swap(alloc_, o.alloc_);
    std::swap(data_, o.data_);
    std::swap(shape_, o.shape_);
    std::swap(tag_, o.tag_);
  }

  Allocator* alloc_ = nullptr;
  T* data_ = nullptr;
  Shape shape_;
  MemTag tag_ = MemTag::Other;
};

using Tensor = BasicTensor<float>;          // fp32 storage
using IndexTensor = BasicTensor<std::int32_t>;  // token ids
using MaskTensor = BasicTensor<std::uint8_t>;   // dropout masks

}  // namespace strata::backend::cpu
