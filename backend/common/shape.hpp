#pragma once
// A tensor's dimensions: what both backends' tensors, the parameter table
// and the bucket plan describe shapes with.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "sim/error.hpp"

namespace strata::backend {

// Up to four dimensions, held inline (no heap).
class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) {
    if (dims.size() > kMaxRank) throw Error("Shape: more than 4 dimensions");
    for (auto d : dims) {
      if (d < 0) throw Error("Shape: negative dimension " + std::to_string(d));
      dims_[rank_++] = d;
    }
  }
  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
    return n;
  }
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? "," : "") + std::to_string(dims_[static_cast<std::size_t>(i)]);
    return s + "]";
  }

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace strata::backend
