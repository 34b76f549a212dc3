#pragma once
// Gradient compression for data parallelism, executed for real.
//
// One Compressor per rank compresses that rank's flat fp32 gradient (its
// pipeline stage's parameters, one after another) in the tasks the lowering
// emits (strategies::compressed_exchange): CompressEncode builds the
// rank's message, each CompressRound runs one collective over the dp group,
// CompressDecode writes the SUM of every rank's decompressed contribution,
// the same bits on every rank. (The executor scales each rank's loss by
// 1/(m·dp), so the sum is the mean gradient; a compressor never divides.)
// Every round moves the bytes compressed_exchange prices for an fp32 plan
// (`exchanged()` records them in its convention).
//
// Error feedback (Seide et al. 2014; Stich et al. 2018; Karimireddy et al.
// 2019): a rank with a residual e compresses x = g + e and keeps what its
// message did not carry, e = x − C(x), for the next step; over any number of
// steps, what was transmitted plus the final residuals equals the gradients'
// sum.
//
// | method   | encode | rounds | decode |
// |---|---|---|---|
// | topk     | the k = ⌈ratio·n⌉ largest |x| (Aji & Heafield 2017; Lin et al. 2018, DGC) as (int32 index, fp16 value) pairs; residual optional | all-gather of every rank's pairs | scatter-add the pairs, rank by rank |
// | randomk  | k indices by selection sampling from a seed all ranks share, their values; residual optional (without it the values are scaled by n/k: unbiased) | all-reduce of the k values | scatter the sum |
// | qsgd     | per bucket of 512: the fp32 norm and, per entry, a sign and a level l ∈ 0..s, s = 2^bits − 1, rounded stochastically so that E[norm·l/s] = |x| (Alistarh et al. 2017); no residual | all-gather of norms and (bits+1)-bit codes | sum the dequantized codes, rank by rank |
// | onebit   | x split into dp chunks, each as sign bits and the mean |x| of every 512 entries (EF-SignSGD's scaled sign, Karimireddy et al. 2019; 1-bit SGD, Seide et al. 2014); worker residual | 0: all-to-all of the chunks (a compressed reduce-scatter); the chunk's owner sums them, adds its server residual and compresses the sum again. 1: all-gather of the owners' chunks | every chunk's sign·scale |
// | powersgd | per matrix M = g + e (rows × cols): P = M·Q with the warm-started Q (Vogels et al. 2019); vectors (biases, norms) copied uncompressed; residual always | 0: all-reduce of P and the vectors. 1: Gram–Schmidt on P, Q = Mᵀ·P, all-reduce of Q (the next step's warm start) | P·Qᵀ per matrix; e = M − P·Qᵀ/dp (each rank's share of what the sum missed) |
//
// Randomness is deterministic: random-k's indices come from one Rng per dp
// group (same seed on every rank), QSGD's rounding from one per rank,
// PowerSGD's initial Q from the shared seed. Buffers (residuals, messages,
// P and Q) come from the rank's allocator under MemTag::CommBuffers, where
// the memory model counts compression state (lowering/memory.cpp).
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/common/compression_layout.hpp"
#include "backend/cpu/allocator.hpp"
#include "backend/cpu/comm.hpp"
#include "backend/cpu/tensor.hpp"
#include "lowering/lower.hpp"
#include "strategies/plan.hpp"

namespace strata::backend::cpu {

// IEEE binary16, round to nearest even (overflow gives infinity).
std::uint16_t to_half(float x);
float from_half(std::uint16_t h);

class Compressor {
 public:
  virtual ~Compressor() = default;
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  std::int64_t size() const { return n_; }
  // The collective rounds between encode and decode.
  virtual int rounds() const = 0;
  // CompressEncode: `grad` (size() floats) is this rank's contribution.
  void encode(std::span<const float> grad);
  // CompressRound `round` over the dp group (all members call it).
  void round(int round, Comm& dp);
  // CompressDecode: `out` (size() floats) gets the sum over the group.
  void decode(std::span<float> out);

  // The rounds of the last step, in order.
  const std::vector<ExchangedRound>& exchanged() const { return exchanged_; }
  // The error-feedback residual (empty without error feedback) and, for
  // onebit, the residual of the chunk this rank reduces (empty otherwise).
  std::span<const float> residual() const { return residual_.span(); }
  virtual std::span<const float> chunk_residual() const { return {}; }
  // This rank's words in the collective that runs next (after encode, or
  // after a round that is not the last), as they go on the wire: for tests
  // that compare another implementation's messages byte for byte. Empty
  // where the round computes them itself (PowerSGD's Q).
  virtual std::span<const std::uint32_t> payload() const = 0;

 protected:
  Compressor(const CompressorOptions& o, FlatLayout layout, Allocator& alloc, bool residual);
  virtual void do_encode(std::span<const float> grad) = 0;
  virtual void do_round(int round, Comm& dp) = 0;
  virtual void do_decode(std::span<float> out) = 0;
  int next_round() const { return next_round_; }
  void log(strategies::Collective op, std::int64_t words) { exchanged_.push_back({op, 4 * words}); }

  CompressorOptions o_;
  FlatLayout layout_;
  std::int64_t n_ = 0;
  Tensor residual_;

 private:
  enum class Phase { Idle, Encoded };
  Phase phase_ = Phase::Idle;
  int next_round_ = 0;
  std::vector<ExchangedRound> exchanged_;
};

// The compressor of `o.method` for a flat gradient laid out as `layout`
// (tensors in order, covering it without gaps). Throws Error for method none
// (check_compressor_method: backend/common/compression_layout.hpp).
std::unique_ptr<Compressor> make_compressor(const CompressorOptions& o, FlatLayout layout,
                                            Allocator& alloc);

}  // namespace strata::backend::cpu
