#include "backend/common/compression_layout.hpp"

#include <algorithm>
#include <string>

#include "sim/error.hpp"

namespace strata::backend {

PowerSgdLayout powersgd_layout(const FlatLayout& layout, std::int64_t rank) {
  PowerSgdLayout out;
  std::int64_t vectors = 0;
  for (const FlatTensor& t : layout) {
    PowerSgdPart m;
    m.t = t;
    if (t.matrix) {
      m.r = std::min({rank, t.rows, t.cols});
      m.p = out.p_size;
      m.q = out.q_size;
      m.column = out.columns;
      out.p_size += t.rows * m.r;
      out.q_size += t.cols * m.r;
      out.columns += m.r;
    } else {
      m.p = vectors;  // relative to the vectors' start, fixed below
      vectors += t.numel();
    }
    out.parts.push_back(m);
  }
  for (auto& m : out.parts)
    if (!m.t.matrix) m.p += out.p_size;
  out.p_size += vectors;
  return out;
}

FlatLayout flat_layout(std::span<const Shape> shapes) {
  FlatLayout out;
  std::int64_t at = 0;
  for (const Shape& s : shapes) {
    const bool matrix = s.rank() == 2;
    out.push_back({at, matrix ? s[0] : s.numel(), matrix ? s[1] : 1, matrix});
    at += s.numel();
  }
  return out;
}

void check_compressor_method(const strategies::Compression& c, std::string_view who) {
  const std::string w(who);
  using strategies::CompressionMethod;
  switch (c.method) {
    case CompressionMethod::TopK:
    case CompressionMethod::RandomK:
      if (!(c.ratio > 0 && c.ratio <= 1)) throw Error(w + ": ratio must lie in (0, 1]");
      return;
    case CompressionMethod::Qsgd:
      if (c.bits < 1 || c.bits > 16) throw Error(w + ": qsgd bits must lie in 1..16");
      return;
    case CompressionMethod::OneBit: return;
    case CompressionMethod::PowerSgd:
      if (c.rank < 1) throw Error(w + ": powersgd rank must be >= 1");
      return;
    case CompressionMethod::None: break;
  }
  throw Error(w + ": method none compresses nothing");
}

}  // namespace strata::backend
