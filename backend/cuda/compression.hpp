#pragma once
// Gradient compression on the GPU: backend/cpu/compression.hpp's
// compressors (top-k, random-k, QSGD, 1-bit, PowerSGD, with the same error
// feedback) with their messages in device memory, for a multi-GPU executor
// that runs the collectives itself (NCCL). Internal to backend/cuda.
//
// The same formats, residual rules and random streams as the CPU's: for
// the same gradients a rank's message is the CPU's byte for byte, and so
// are the decoded sum and the residuals (top-k, random-k, QSGD, 1-bit).
// PowerSGD's P and Q come from cuBLAS, whose sums run in another order than
// the CPU's BLAS: the same format and warm start, values equal to rounding.
// Random-k's indices are drawn on the host (selection sampling is
// sequential and needs no gradient), everything else on the device; QSGD's
// rounding stream jumps ahead to each bucket (compression_math.hpp).
//
// Not yet run on a GPU: the arithmetic's host runs are checked against the
// CPU (compression_math_test.cpp, label unit); compression_test.cpp (label
// gpu) checks the device runs where a GPU exists.
//
// The phases, as the CPU's CompressEncode / CompressRound / CompressDecode,
// with the collectives left to the caller:
//
//   c->encode(grad);                        // this rank's flat gradient (device)
//   for (int r = 0; r < c->rounds(); ++r) {
//     const CompressRound x = c->round(r);  // local work before collective r
//     run x.op over the dp group on x.send / x.recv (below)
//   }
//   c->decode(out);                         // the group's sum (device)
//
// | method   | round 0 | round 1 |
// |---|---|---|
// | topk     | AllGather of topk_words(k) words | — |
// | randomk  | AllReduce (sum) of k floats | — |
// | qsgd     | AllGather of qsgd_words(n, bits) words | — |
// | onebit   | AllToAll of one block per rank (a compressed reduce-scatter) | AllGather of the owners' blocks (round(1) first sums the received blocks onto the server residual and compresses them again) |
// | powersgd | AllReduce of every P and the vectors | AllReduce of every Q (round(1) first orthogonalises P and computes Q = Mᵀ·P) |
//
// Every phase enqueues on the allocator's current stream (the executor sets
// it to the task's stream) and returns without synchronising, except
// random-k's encode (the index upload from pageable memory) and PowerSGD's
// decode (it reads which Q columns came back zero, to redraw them on the
// host as the CPU does). The caller must run each collective in that
// stream's order (NCCL on the same stream, or events) and must not touch a
// round's buffers between round() and its collective except through it.
//
// Buffers (residuals, messages, P and Q, QSGD's jump maps) are allocated
// once under MemTag::CommBuffers; top-k's sort scratch per step under
// MemTag::Workspace.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/common/compression_layout.hpp"
#include "backend/cuda/blas.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/cuda/tensor.hpp"

namespace strata::backend::cuda {

// What the caller runs between two phases, over the dp group, all ranks alike.
enum class CompressCollective {
  // ncclAllGather, in place: `count` 32-bit words from each rank; this
  // rank's are already at send = recv + rank·count.
  AllGather,
  // ncclAllReduce of `count` fp32 with ncclSum, in place (send == recv).
  AllReduce,
  // `count` words per block: send holds one block per rank (block j goes
  // to rank j), recv gets rank j's block for this rank as its block j
  // (ncclSend / ncclRecv pairs inside ncclGroupStart / ncclGroupEnd).
  AllToAll,
};

struct CompressRound {
  CompressCollective op = CompressCollective::AllGather;
  const void* send = nullptr;
  void* recv = nullptr;
  std::int64_t count = 0;  // words (floats for AllReduce): per rank, per block for AllToAll
  // This rank's outgoing bytes in device memory (what the CPU's
  // Compressor::payload() holds): count elements, ranks·count for AllToAll.
  const void* payload() const { return send; }
};

class DeviceCompressor {
 public:
  virtual ~DeviceCompressor() = default;
  DeviceCompressor(const DeviceCompressor&) = delete;
  DeviceCompressor& operator=(const DeviceCompressor&) = delete;

  std::int64_t size() const { return n_; }
  virtual int rounds() const = 0;
  // grad: this rank's size() floats on the device (not modified).
  void encode(const float* grad);
  // The local work that precedes collective r, and the collective; r runs
  // 0, 1, … after encode, the previous round's collective done.
  CompressRound round(int r);
  // out: size() floats on the device, the sum over the group (every rank
  // the same bits); the last round's collective done.
  void decode(float* out);

  // The rounds of the last step in the CPU's convention (bytes priced as
  // strategies::compressed_exchange does).
  const std::vector<ExchangedRound>& exchanged() const { return exchanged_; }
  // Device residual of size() floats (null without error feedback), and
  // 1-bit's server residual of this rank's chunk (null otherwise).
  const float* residual() const { return residual_.empty() ? nullptr : residual_.data(); }
  virtual const float* chunk_residual() const { return nullptr; }
  virtual std::int64_t chunk_residual_size() const { return 0; }

 protected:
  DeviceCompressor(const CompressorOptions& o, FlatLayout layout, DeviceAllocator& alloc, bool residual);
  virtual void do_encode(const float* grad) = 0;
  virtual CompressRound do_round(int r) = 0;
  virtual void do_decode(float* out) = 0;
  void log(strategies::Collective op, std::int64_t words) { exchanged_.push_back({op, 4 * words}); }
  cudaStream_t stream() const { return alloc_->stream(); }
  // x = g + e into the residual (error feedback), or g itself.
  const float* with_residual(const float* g);

  CompressorOptions o_;
  FlatLayout layout_;
  DeviceAllocator* alloc_;
  std::int64_t n_ = 0;
  DeviceTensor residual_;

 private:
  enum class Phase { Idle, Encoded };
  Phase phase_ = Phase::Idle;
  int next_round_ = 0;
  std::vector<ExchangedRound> exchanged_;
};

// The device compressor of `o.method` for a flat gradient laid out as
// `layout`; `blas` (PowerSGD's products) must outlive it. Throws Error for
// method none and for the options the CPU's make_compressor refuses.
std::unique_ptr<DeviceCompressor> make_device_compressor(const CompressorOptions& o, FlatLayout layout,
                                                         DeviceAllocator& alloc, Blas& blas);

}  // namespace strata::backend::cuda
