#pragma once
// What both backends' gradient compressors share (backend/cpu/compression.hpp,
// backend/cuda/compression.hpp): the flat gradient's layout, PowerSGD's
// buffers over it, a compressor's options, the rounds it reports and the
// check of a method's settings.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backend/common/shape.hpp"
#include "sim/units.hpp"
#include "lowering/lower.hpp"
#include "strategies/plan.hpp"

namespace strata::backend {

// One parameter tensor inside the flat gradient. PowerSGD compresses the
// matrices (rows × cols, row-major) and sends the vectors as they are.
struct FlatTensor {
  std::int64_t offset = 0;
  std::int64_t rows = 0, cols = 1;
  bool matrix = false;
  std::int64_t numel() const { return rows * cols; }
};
using FlatLayout = std::vector<FlatTensor>;
// Tensors of these shapes one after another; the 2-D ones are matrices.
FlatLayout flat_layout(std::span<const Shape> shapes);

// PowerSGD's buffers over a layout (the CPU's and the device's): each
// matrix's rank r = min(rank, rows, cols), its rows·r block of P and cols·r
// block of Q, and its first column among all matrices' (columns in all);
// vectors (biases, norms) travel uncompressed in P after every matrix's
// block, at their own offset p.
struct PowerSgdPart {
  FlatTensor t;
  std::int64_t r = 0;          // 0 for a vector
  std::int64_t p = 0, q = 0;   // offsets in P and Q
  std::int64_t column = 0;     // first of its r columns
};
struct PowerSgdLayout {
  std::vector<PowerSgdPart> parts;  // in the layout's order
  std::int64_t p_size = 0, q_size = 0, columns = 0;
};
PowerSgdLayout powersgd_layout(const FlatLayout& layout, std::int64_t rank);

struct CompressorOptions {
  strategies::Compression method;
  int ranks = 1;           // the dp group's size
  int rank = 0;            // this rank's position in it
  std::uint64_t seed = 1;  // the same on every rank of the group
};

// One collective a step ran, as compressed_exchange prices it: the whole
// buffer's bytes (all-gather: the output; reduce-scatter, here an
// all-to-all: the input; all-reduce: the data).
struct ExchangedRound {
  strategies::Collective op = strategies::Collective::AllReduce;
  Bytes bytes = 0;
};

// Throws Error (prefixed by `who`) for a method this backend cannot build:
// none, a ratio outside (0, 1], QSGD bits outside 1..16, a PowerSGD rank
// below 1.
void check_compressor_method(const strategies::Compression& c, std::string_view who);

}  // namespace strata::backend
