#include "backend/cpu/compression.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "backend/cpu/blas.hpp"
#include "backend/common/rng.hpp"
#include "sim/error.hpp"

namespace strata::backend::cpu {

std::uint16_t to_half(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t a = bits & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, infinity
  const int e = static_cast<int>(a >> 23);  // biased fp32 exponent
  // Rounds m / 2^shift to the nearest integer, ties to even.
  auto round_shift = [](std::uint32_t m, int shift) {
    const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  };
  if (e >= 113) {
    // Normal half (or overflow): 10 of the 23 mantissa bits; a carry moves
    // into the exponent, and past 65504 into infinity.
    const std::uint32_t h = round_shift(a - (112u << 23), 13);
    return sign | static_cast<std::uint16_t>(std::min<std::uint32_t>(h, 0x7c00u));
  }
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  // Subnormal half: units of 2^-24 = (1.m) · 2^(e − 126).
  return sign | static_cast<std::uint16_t>(round_shift((a & 0x7fffffu) | 0x800000u, 126 - e));
}

float from_half(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

namespace {

using strategies::Collective;
using strategies::CompressionMethod;
using Words = BasicTensor<std::uint32_t>;

// Packed messages travel through Comm's float spans: its all-gather and
// all-to-all only copy bytes (memcpy), never compute on them.
std::span<float> as_floats(std::uint32_t* w, std::int64_t n) {
  return {reinterpret_cast<float*>(w), static_cast<std::size_t>(n)};
}

std::span<const std::uint32_t> as_words(const float* f, std::int64_t n) {
  return {reinterpret_cast<const std::uint32_t*>(f), static_cast<std::size_t>(n)};
}

std::int64_t words_for_bits(std::int64_t bits) { return (bits + 31) / 32; }

// All-gathers every rank's `words` words in place: rank r's lie at r·words of `buf`.
void gather_words(Comm& dp, Words& buf, std::int64_t words) {
  dp.all_gather(as_floats(buf.data() + dp.rank() * words, words), as_floats(buf.data(), buf.numel()));
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
}

// `width`-bit codes (width <= 32) packed into 32-bit words, lowest bits first.
class BitWriter {
 public:
  explicit BitWriter(std::uint32_t* w) : w_(w) {}
  void put(std::uint32_t v, int width) {
    acc_ |= static_cast<std::uint64_t>(v) << fill_;
    fill_ += width;
    while (fill_ >= 32) {
      *w_++ = static_cast<std::uint32_t>(acc_);
      acc_ >>= 32;
      fill_ -= 32;
    }
  }
  void flush() {
    if (fill_ > 0) *w_++ = static_cast<std::uint32_t>(acc_);
    acc_ = 0;
    fill_ = 0;
  }

 private:
  std::uint32_t* w_;
  std::uint64_t acc_ = 0;
  int fill_ = 0;
};

class BitReader {
 public:
  explicit BitReader(const std::uint32_t* w) : w_(w) {}
  std::uint32_t get(int width) {
    while (fill_ < width) {
      acc_ |= static_cast<std::uint64_t>(*w_++) << fill_;
      fill_ += 32;
    }
    const auto v = static_cast<std::uint32_t>(acc_ & ((std::uint64_t{1} << width) - 1));
    acc_ >>= width;
    fill_ -= width;
    return v;
  }

 private:
  const std::uint32_t* w_;
  std::uint64_t acc_ = 0;
  int fill_ = 0;
};

// x = g + e in the residual (error feedback), or g itself.
std::span<const float> with_residual(Tensor& residual, std::span<const float> g) {
  if (residual.empty()) return g;
  for (std::size_t i = 0; i < g.size(); ++i) residual[static_cast<std::int64_t>(i)] += g[i];
  return residual.span();
}

// ---- top-k ------------------------------------------------------------------

class TopK final : public Compressor {
 public:
  TopK(const CompressorOptions& o, FlatLayout l, Allocator& a)
      : Compressor(o, std::move(l), a, o.method.error_feedback),
        k_(strategies::sparse_k(o.method.ratio, n_)),
        words_(k_ + (k_ + 1) / 2),
        chosen_(a, {k_}, MemTag::CommBuffers),
        gathered_(a, {words_ * o.ranks}, MemTag::CommBuffers) {}
  int rounds() const override { return 1; }
  std::span<const std::uint32_t> payload() const override {
    return {gathered_.data() + o_.rank * words_, static_cast<std::size_t>(words_)};
  }

 private:
  std::uint32_t* mine() { return gathered_.data() + o_.rank * words_; }

  void do_encode(std::span<const float> g) override {
    const std::span<const float> x = with_residual(residual_, g);
    // The k largest |x|, ties to the lower index: a heap whose top is the
    // worst kept.
    auto better = [&](std::int32_t a, std::int32_t b) {
      const float fa = std::fabs(x[static_cast<std::size_t>(a)]), fb = std::fabs(x[static_cast<std::size_t>(b)]);
      return fa > fb || (fa == fb && a < b);
    };
    std::int32_t* heap = chosen_.data();
    std::int64_t size = 0;
    for (std::int64_t i = 0; i < n_; ++i) {
      const auto idx = static_cast<std::int32_t>(i);
      if (size < k_) {
        heap[size++] = idx;
        std::push_heap(heap, heap + size, better);
      } else if (better(idx, heap[0])) {
        std::pop_heap(heap, heap + size, better);
        heap[size - 1] = idx;
        std::push_heap(heap, heap + size, better);
      }
    }
    std::sort(heap, heap + k_);
    // Message: k indices, then the fp16 values two to a word.
    std::uint32_t* w = mine();
    std::uint32_t* values = w + k_;
    std::fill(values, values + (k_ + 1) / 2, 0u);
    constexpr float kMax = 65504.0f;  // the largest fp16: more stays in the residual
    for (std::int64_t j = 0; j < k_; ++j) {
      const std::int32_t i = heap[j];
      w[j] = static_cast<std::uint32_t>(i);
      const std::uint16_t h = to_half(std::clamp(x[static_cast<std::size_t>(i)], -kMax, kMax));
      values[j / 2] |= static_cast<std::uint32_t>(h) << (16 * (j % 2));
      if (!residual_.empty()) residual_[i] -= from_half(h);
    }
  }

  void do_round(int, Comm& dp) override {
    gather_words(dp, gathered_, words_);
    log(Collective::AllGather, gathered_.numel());
  }

  void do_decode(std::span<float> out) override {
    std::fill(out.begin(), out.end(), 0.0f);
    for (int r = 0; r < o_.ranks; ++r) {
      const std::uint32_t* w = gathered_.data() + r * words_;
      for (std::int64_t j = 0; j < k_; ++j)
        out[w[j]] += from_half(static_cast<std::uint16_t>(w[k_ + j / 2] >> (16 * (j % 2))));
    }
  }

  std::int64_t k_, words_;
  IndexTensor chosen_;
  Words gathered_;
};

// ---- random-k ---------------------------------------------------------------

class RandomK final : public Compressor {
 public:
  RandomK(const CompressorOptions& o, FlatLayout l, Allocator& a)
      : Compressor(o, std::move(l), a, o.method.error_feedback),
        k_(strategies::sparse_k(o.method.ratio, n_)),
        shared_(mix(o.seed, 0x52414e444bULL)),
        index_(a, {k_}, MemTag::CommBuffers),
        values_(a, {k_}, MemTag::CommBuffers) {}
  int rounds() const override { return 1; }
  std::span<const std::uint32_t> payload() const override { return as_words(values_.data(), k_); }

 private:
  void do_encode(std::span<const float> g) override {
    const std::span<const float> x = with_residual(residual_, g);
    // Selection sampling (Knuth's Algorithm S): exactly k indices, in
    // order, each n-subset equally likely; every rank draws the same.
    std::int64_t need = k_, j = 0;
    for (std::int64_t i = 0; i < n_ && need > 0; ++i)
      if (shared_.uniform() * static_cast<double>(n_ - i) < static_cast<double>(need)) {
        index_[j++] = static_cast<std::int32_t>(i);
        --need;
      }
    // Without a residual the values are scaled by n/k (unbiased); with one
    // they go as they are and the residual keeps the rest (Stich et al. 2018).
    const float scale = residual_.empty() ? static_cast<float>(static_cast<double>(n_) / static_cast<double>(k_)) : 1.0f;
    for (std::int64_t q = 0; q < k_; ++q) {
      const auto i = static_cast<std::size_t>(index_[q]);
      values_[q] = x[i] * scale;
      if (!residual_.empty()) residual_[index_[q]] = 0.0f;
    }
  }

  void do_round(int, Comm& dp) override {
    dp.all_reduce(values_.span());
    log(Collective::AllReduce, k_);
  }

  void do_decode(std::span<float> out) override {
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::int64_t q = 0; q < k_; ++q) out[static_cast<std::size_t>(index_[q])] = values_[q];
  }

  std::int64_t k_;
  Rng shared_;
  IndexTensor index_;
  Tensor values_;
};

// ---- QSGD -------------------------------------------------------------------

class Qsgd final : public Compressor {
 public:
  Qsgd(const CompressorOptions& o, FlatLayout l, Allocator& a)
      : Compressor(o, std::move(l), a, false),
        width_(static_cast<int>(o.method.bits) + 1),
        levels_(static_cast<double>((std::uint32_t{1} << o.method.bits) - 1)),
        buckets_((n_ + strategies::kQsgdBucket - 1) / strategies::kQsgdBucket),
        words_(buckets_ + words_for_bits(n_ * width_)),
        own_(mix(o.seed, 0x51534744ULL + static_cast<std::uint64_t>(o.rank))),
        gathered_(a, {words_ * o.ranks}, MemTag::CommBuffers) {}
  int rounds() const override { return 1; }
  std::span<const std::uint32_t> payload() const override {
    return {gathered_.data() + o_.rank * words_, static_cast<std::size_t>(words_)};
  }

 private:
  std::uint32_t* mine() { return gathered_.data() + o_.rank * words_; }

  void do_encode(std::span<const float> x) override {
    std::uint32_t* norms = mine();
    BitWriter codes(norms + buckets_);
    for (std::int64_t b = 0; b < buckets_; ++b) {
      const std::int64_t lo = b * strategies::kQsgdBucket, hi = std::min(n_, lo + strategies::kQsgdBucket);
      double sq = 0;
      for (std::int64_t i = lo; i < hi; ++i) sq += static_cast<double>(x[static_cast<std::size_t>(i)]) * x[static_cast<std::size_t>(i)];
      const auto norm = static_cast<float>(std::sqrt(sq));
      norms[b] = std::bit_cast<std::uint32_t>(norm);
      for (std::int64_t i = lo; i < hi; ++i) {
        const float v = x[static_cast<std::size_t>(i)];
        // |v|/norm·s lies between levels l and l + 1; l + 1 with probability
        // r − l, so that E[level]·norm/s = |v|.
        const double r = norm > 0 ? static_cast<double>(std::fabs(v)) / norm * levels_ : 0.0;
        auto level = static_cast<std::uint32_t>(r);
        if (own_.uniform() < r - static_cast<double>(level)) ++level;
        level = std::min(level, static_cast<std::uint32_t>(levels_));
        codes.put((level << 1) | (v < 0 ? 1u : 0u), width_);
      }
    }
    codes.flush();
  }

  void do_round(int, Comm& dp) override {
    gather_words(dp, gathered_, words_);
    log(Collective::AllGather, gathered_.numel());
  }

  void do_decode(std::span<float> out) override {
    std::fill(out.begin(), out.end(), 0.0f);
    for (int r = 0; r < o_.ranks; ++r) {
      const std::uint32_t* norms = gathered_.data() + r * words_;
      BitReader codes(norms + buckets_);
      for (std::int64_t i = 0; i < n_; ++i) {
        const double norm = std::bit_cast<float>(norms[i / strategies::kQsgdBucket]);
        const std::uint32_t c = codes.get(width_);
        const auto v = static_cast<float>(norm * static_cast<double>(c >> 1) / levels_);
        out[static_cast<std::size_t>(i)] += (c & 1u) ? -v : v;
      }
    }
  }

  int width_;
  double levels_;
  std::int64_t buckets_, words_;
  Rng own_;
  Words gathered_;
};

// ---- 1-bit ------------------------------------------------------------------

class OneBit final : public Compressor {
 public:
  OneBit(const CompressorOptions& o, FlatLayout l, Allocator& a)
      : Compressor(o, std::move(l), a, true),
        most_((n_ + o.ranks - 1) / o.ranks),
        scales_((most_ + strategies::kOneBitBucket - 1) / strategies::kOneBitBucket),
        block_(scales_ + words_for_bits(most_)),
        server_(a, {chunk_range(n_, o.ranks, o.rank).size()}, MemTag::CommBuffers),
        send_(a, {block_ * o.ranks}, MemTag::CommBuffers),
        recv_(a, {block_ * o.ranks}, MemTag::CommBuffers) {}
  int rounds() const override { return 2; }
  std::span<const float> chunk_residual() const override { return server_.span(); }
  // Round 0 sends every block (chunk j's to rank j), round 1 this rank's.
  std::span<const std::uint32_t> payload() const override {
    if (next_round() == 0) return {send_.data(), static_cast<std::size_t>(send_.numel())};
    return {send_.data() + o_.rank * block_, static_cast<std::size_t>(block_)};
  }

 private:
  static constexpr std::int64_t kBucket = strategies::kOneBitBucket;

  // Writes x (one chunk) into `block` as the mean |x| of each bucket and one
  // sign bit per entry; e = x − scale·sign (e may be x itself).
  void compress(std::span<const float> x, std::uint32_t* block, float* e) const {
    BitWriter signs(block + scales_);
    const auto n = static_cast<std::int64_t>(x.size());
    for (std::int64_t lo = 0; lo < n; lo += kBucket) {
      const std::int64_t hi = std::min(n, lo + kBucket);
      double sum = 0;
      for (std::int64_t i = lo; i < hi; ++i) sum += std::fabs(x[static_cast<std::size_t>(i)]);
      const auto scale = static_cast<float>(sum / static_cast<double>(hi - lo));
      block[lo / kBucket] = std::bit_cast<std::uint32_t>(scale);
      for (std::int64_t i = lo; i < hi; ++i) {
        const float v = x[static_cast<std::size_t>(i)];
        signs.put(v >= 0 ? 1u : 0u, 1);
        e[i] = v - (v >= 0 ? scale : -scale);
      }
    }
    signs.flush();
  }
  // Adds the block's scale·sign over its chunk's `n` entries to `out`.
  void add(const std::uint32_t* block, std::int64_t n, float* out) const {
    BitReader signs(block + scales_);
    for (std::int64_t i = 0; i < n; ++i) {
      const float scale = std::bit_cast<float>(block[i / kBucket]);
      out[i] += signs.get(1) ? scale : -scale;
    }
  }

  void do_encode(std::span<const float> g) override {
    const std::span<const float> x = with_residual(residual_, g);
    for (int j = 0; j < o_.ranks; ++j) {
      const ChunkRange c = chunk_range(n_, o_.ranks, j);
      compress(x.subspan(static_cast<std::size_t>(c.begin), static_cast<std::size_t>(c.size())),
               send_.data() + j * block_, residual_.data() + c.begin);
    }
  }

  void do_round(int round, Comm& dp) override {
    if (round == 0) {
      // Compressed reduce-scatter: every rank's block of my chunk, summed
      // onto my server residual, compressed again into my block of send_.
      dp.all_to_all(as_floats(send_.data(), send_.numel()), as_floats(recv_.data(), recv_.numel()));
      log(Collective::ReduceScatter, send_.numel());
      for (int j = 0; j < o_.ranks; ++j) add(recv_.data() + j * block_, server_.numel(), server_.data());
      compress(server_.span(), mine(), server_.data());
      return;
    }
    gather_words(dp, send_, block_);
    log(Collective::AllGather, send_.numel());
  }

  void do_decode(std::span<float> out) override {
    std::fill(out.begin(), out.end(), 0.0f);
    for (int j = 0; j < o_.ranks; ++j) {
      const ChunkRange c = chunk_range(n_, o_.ranks, j);
      add(send_.data() + j * block_, c.size(), out.data() + c.begin);
    }
  }

  std::uint32_t* mine() { return send_.data() + o_.rank * block_; }

  std::int64_t most_;    // entries of the largest chunk
  std::int64_t scales_;  // per block: one per bucket of the largest chunk
  std::int64_t block_;   // words per block: scales, then sign bits
  Tensor server_;        // residual of the chunk this rank reduces
  Words send_, recv_;
};

// ---- PowerSGD ---------------------------------------------------------------

class PowerSgd final : public Compressor {
 public:
  PowerSgd(const CompressorOptions& o, FlatLayout l, Allocator& a)
      : Compressor(o, std::move(l), a, true), shared_(mix(o.seed, 0x504f574552ULL)) {
    PowerSgdLayout pl = powersgd_layout(layout_, o.method.rank);
    parts_ = std::move(pl.parts);
    p_ = Tensor(a, {pl.p_size}, MemTag::CommBuffers);
    q_ = Tensor(a, {pl.q_size}, MemTag::CommBuffers);
    for (float& v : q_.span()) v = static_cast<float>(shared_.normal());
  }
  int rounds() const override { return 2; }
  std::span<const std::uint32_t> payload() const override {
    return next_round() == 0 ? as_words(p_.data(), p_.numel()) : std::span<const std::uint32_t>{};
  }

 private:
  using Matrix = PowerSgdPart;
  float* M(const Matrix& m) { return residual_.data() + m.t.offset; }

  void do_encode(std::span<const float> g) override {
    with_residual(residual_, g);  // M = g + e, kept until decode
    for (const Matrix& m : parts_) {
      if (m.t.matrix) {
        gemm(false, false, m.t.rows, m.r, m.t.cols, 1.0f, M(m), m.t.cols, q_.data() + m.q, m.r, 0.0f,
             p_.data() + m.p, m.r);
      } else {
        std::copy_n(M(m), m.t.numel(), p_.data() + m.p);  // sent exactly: nothing left over
        std::fill_n(M(m), m.t.numel(), 0.0f);
      }
    }
  }

  void do_round(int round, Comm& dp) override {
    if (round == 0) {
      dp.all_reduce(p_.span());
      log(Collective::AllReduce, p_.numel());
      return;
    }
    for (const Matrix& m : parts_) {
      if (!m.t.matrix) continue;
      orthogonalize(p_.data() + m.p, m.t.rows, m.r);
      gemm(true, false, m.t.cols, m.r, m.t.rows, 1.0f, M(m), m.t.cols, p_.data() + m.p, m.r, 0.0f,
           q_.data() + m.q, m.r);
    }
    dp.all_reduce(q_.span());
    log(Collective::AllReduce, q_.numel());
  }

  void do_decode(std::span<float> out) override {
    const float share = 1.0f / static_cast<float>(o_.ranks);
    for (const Matrix& m : parts_) {
      float* o = out.data() + m.t.offset;
      if (!m.t.matrix) {
        std::copy_n(p_.data() + m.p, m.t.numel(), o);
        continue;
      }
      gemm(false, true, m.t.rows, m.t.cols, m.r, 1.0f, p_.data() + m.p, m.r, q_.data() + m.q, m.r, 0.0f,
           o, m.t.cols);
      float* e = M(m);
      for (std::int64_t i = 0; i < m.t.numel(); ++i) e[i] -= o[i] * share;
      // A column of Q that came back zero would stay zero: the next warm
      // start takes a fresh one (the same on every rank: Q is).
      for (std::int64_t c = 0; c < m.r; ++c) {
        float* q = q_.data() + m.q + c;
        bool zero = true;
        for (std::int64_t i = 0; i < m.t.cols && zero; ++i) zero = q[i * m.r] == 0.0f;
        if (zero)
          for (std::int64_t i = 0; i < m.t.cols; ++i) q[i * m.r] = static_cast<float>(shared_.normal());
      }
    }
  }

  // Gram–Schmidt on the r columns of P (rows × r, row-major), each
  // projection done twice ("twice is enough": one pass leaves a column
  // that was nearly dependent far from orthogonal in fp32). A column with
  // less than 10⁻⁶ of its length left is dependent: set to zero.
  static void orthogonalize(float* P, std::int64_t rows, std::int64_t r) {
    auto column_norm = [&](std::int64_t j) {
      double sq = 0;
      for (std::int64_t i = 0; i < rows; ++i) sq += static_cast<double>(P[i * r + j]) * P[i * r + j];
      return std::sqrt(sq);
    };
    for (std::int64_t j = 0; j < r; ++j) {
      const double before = column_norm(j);
      for (int pass = 0; pass < 2; ++pass)
        for (std::int64_t l = 0; l < j; ++l) {
          double d = 0;
          for (std::int64_t i = 0; i < rows; ++i) d += static_cast<double>(P[i * r + l]) * P[i * r + j];
          for (std::int64_t i = 0; i < rows; ++i) P[i * r + j] -= static_cast<float>(d) * P[i * r + l];
        }
      const double norm = column_norm(j);
      const float inv = norm > 1e-6 * before ? static_cast<float>(1.0 / norm) : 0.0f;
      for (std::int64_t i = 0; i < rows; ++i) P[i * r + j] *= inv;
    }
  }

  Rng shared_;
  std::vector<Matrix> parts_;
  Tensor p_;  // every matrix's P, then the vectors
  Tensor q_;  // every matrix's Q: the warm start, then the all-reduced Q
};

}  // namespace

// ---- Compressor ---------------------------------------------------------------

Compressor::Compressor(const CompressorOptions& o, FlatLayout layout, Allocator& alloc, bool residual)
    : o_(o), layout_(std::move(layout)) {
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks)
    throw Error("compressor: rank " + std::to_string(o.rank) + " outside a group of " + std::to_string(o.ranks));
  for (const FlatTensor& t : layout_) {
    if (t.offset != n_ || t.rows < 0 || t.cols < 1)
      throw Error("compressor: the layout's tensors must follow each other from offset 0");
    n_ += t.numel();
  }
  if (n_ > std::numeric_limits<std::int32_t>::max())
    throw Error("compressor: " + std::to_string(n_) + " gradients do not fit 32-bit indices");
  if (residual) residual_ = Tensor(alloc, {n_}, MemTag::CommBuffers);
}

void Compressor::encode(std::span<const float> grad) {
  if (phase_ != Phase::Idle) throw Error("compressor: encode before the last exchange was decoded");
  if (static_cast<std::int64_t>(grad.size()) != n_)
    throw Error("compressor: encode got " + std::to_string(grad.size()) + " gradients, expected " + std::to_string(n_));
  exchanged_.clear();
  do_encode(grad);
  phase_ = Phase::Encoded;
  next_round_ = 0;
}

void Compressor::round(int r, Comm& dp) {
  if (phase_ != Phase::Encoded || r != next_round_ || r >= rounds())
    throw Error("compressor: round " + std::to_string(r) + " out of order");
  if (dp.size() != o_.ranks || dp.rank() != o_.rank)
    throw Error("compressor: the communicator is not this rank's dp group");
  do_round(r, dp);
  ++next_round_;
}

void Compressor::decode(std::span<float> out) {
  if (phase_ != Phase::Encoded || next_round_ != rounds())
    throw Error("compressor: decode before every round ran");
  if (static_cast<std::int64_t>(out.size()) != n_)
    throw Error("compressor: decode into " + std::to_string(out.size()) + " floats, expected " + std::to_string(n_));
  do_decode(out);
  phase_ = Phase::Idle;
}

std::unique_ptr<Compressor> make_compressor(const CompressorOptions& o, FlatLayout layout,
                                            Allocator& alloc) {
  check_compressor_method(o.method, "compressor");
  switch (o.method.method) {
    case CompressionMethod::TopK: return std::make_unique<TopK>(o, std::move(layout), alloc);
    case CompressionMethod::RandomK: return std::make_unique<RandomK>(o, std::move(layout), alloc);
    case CompressionMethod::Qsgd: return std::make_unique<Qsgd>(o, std::move(layout), alloc);
    case CompressionMethod::OneBit: return std::make_unique<OneBit>(o, std::move(layout), alloc);
    case CompressionMethod::PowerSgd: return std::make_unique<PowerSgd>(o, std::move(layout), alloc);
    case CompressionMethod::None: break;
  }
  throw Error("compressor: method none compresses nothing");
}

}  // namespace strata::backend::cpu
