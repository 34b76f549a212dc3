#include "backend/cuda/compression.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "backend/common/rng.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/compression_kernels.hpp"
#include "backend/cuda/kernels.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

namespace {

namespace cm = compression;
using strategies::Collective;
using strategies::CompressionMethod;
using DeviceWords = BasicDeviceTensor<std::uint32_t>;

// ---- top-k ------------------------------------------------------------------

class TopK final : public DeviceCompressor {
 public:
  TopK(const CompressorOptions& o, FlatLayout l, DeviceAllocator& a)
      : DeviceCompressor(o, std::move(l), a, o.method.error_feedback),
        k_(strategies::sparse_k(o.method.ratio, n_)),
        words_(cm::topk_words(k_)),
        chosen_(a, {k_}, MemTag::CommBuffers),
        gathered_(a, {words_ * o.ranks}, MemTag::CommBuffers) {}
  int rounds() const override { return 1; }

 private:
  std::uint32_t* mine() { return gathered_.data() + o_.rank * words_; }

  void do_encode(const float* g) override {
    const float* x = with_residual(g);
    const std::size_t bytes = cm::topk_scratch_bytes(n_, k_);
    BasicDeviceTensor<unsigned char> scratch(*alloc_, {static_cast<std::int64_t>(bytes)}, MemTag::Workspace,
                                             Fill::Uninitialised);
    cm::topk_select(stream(), x, n_, k_, scratch.data(), bytes, chosen_.data());
    cm::topk_pack(stream(), x, chosen_.data(), k_, residual_.empty() ? nullptr : residual_.data(), mine());
  }  // scratch goes back in stream order, after the sorts

  CompressRound do_round(int) override {
    log(Collective::AllGather, gathered_.numel());
    return {CompressCollective::AllGather, mine(), gathered_.data(), words_};
  }

  void do_decode(float* out) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(4 * n_), stream()));
    // Rank by rank, in order: the CPU's sums.
    for (int r = 0; r < o_.ranks; ++r) cm::topk_scatter_add(stream(), gathered_.data() + r * words_, k_, out);
  }

  std::int64_t k_, words_;
  DeviceIndexTensor chosen_;
  DeviceWords gathered_;
};

// ---- random-k ---------------------------------------------------------------

class RandomK final : public DeviceCompressor {
 public:
  RandomK(const CompressorOptions& o, FlatLayout l, DeviceAllocator& a)
      : DeviceCompressor(o, std::move(l), a, o.method.error_feedback),
        k_(strategies::sparse_k(o.method.ratio, n_)),
        shared_(cm::Xoshiro::seeded(cm::mix(o.seed, cm::kRandomKSalt))),
        host_index_(static_cast<std::size_t>(k_)),
        index_(a, {k_}, MemTag::CommBuffers),
        values_(a, {k_}, MemTag::CommBuffers) {}
  int rounds() const override { return 1; }

 private:
  void do_encode(const float* g) override {
    const float* x = with_residual(g);
    cm::select_indices(shared_, n_, k_, host_index_.data());
    // From pageable memory: returns once the indices are staged, so the
    // host buffer is free for the next step.
    STRATA_CUDA_CHECK(cudaMemcpyAsync(index_.data(), host_index_.data(), static_cast<std::size_t>(4 * k_),
                                      cudaMemcpyHostToDevice, stream()));
    const float scale = residual_.empty() ? static_cast<float>(static_cast<double>(n_) / static_cast<double>(k_)) : 1.0f;
    cm::randomk_gather(stream(), x, index_.data(), k_, scale, residual_.empty() ? nullptr : residual_.data(),
                       values_.data());
  }

  CompressRound do_round(int) override {
    log(Collective::AllReduce, k_);
    return {CompressCollective::AllReduce, values_.data(), values_.data(), k_};
  }

  void do_decode(float* out) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(4 * n_), stream()));
    cm::randomk_scatter(stream(), index_.data(), values_.data(), k_, out);
  }

  std::int64_t k_;
  cm::Xoshiro shared_;
  std::vector<std::int32_t> host_index_;
  DeviceIndexTensor index_;
  DeviceTensor values_;
};

// ---- QSGD -------------------------------------------------------------------

class Qsgd final : public DeviceCompressor {
 public:
  Qsgd(const CompressorOptions& o, FlatLayout l, DeviceAllocator& a)
      : DeviceCompressor(o, std::move(l), a, false),
        width_(static_cast<int>(o.method.bits) + 1),
        levels_(static_cast<double>((std::uint32_t{1} << o.method.bits) - 1)),
        buckets_(cm::qsgd_buckets(n_)),
        words_(cm::qsgd_words(n_, static_cast<int>(o.method.bits))),
        base_(cm::Xoshiro::seeded(cm::mix(o.seed, cm::kQsgdSalt + static_cast<std::uint64_t>(o.rank)))),
        step_(cm::draws_map(static_cast<std::uint64_t>(n_))),
        gathered_(a, {words_ * o.ranks}, MemTag::CommBuffers) {
    const auto jumps = cm::bucket_jumps(static_cast<std::uint64_t>(cm::kQsgdBucket), cm::jump_levels(buckets_));
    jumps_ = BasicDeviceTensor<std::uint64_t>(a, {static_cast<std::int64_t>(jumps.size())}, MemTag::CommBuffers,
                                              Fill::Uninitialised);
    jumps_.upload(jumps);
  }
  int rounds() const override { return 1; }

 private:
  std::uint32_t* mine() { return gathered_.data() + o_.rank * words_; }

  void do_encode(const float* x) override {
    cm::qsgd_encode(stream(), x, n_, base_, jumps_.data(), levels_, width_, mine());
    base_ = cm::apply(step_.data(), base_);  // one draw per entry was used
  }

  CompressRound do_round(int) override {
    log(Collective::AllGather, gathered_.numel());
    return {CompressCollective::AllGather, mine(), gathered_.data(), words_};
  }

  void do_decode(float* out) override {
    cm::qsgd_decode(stream(), gathered_.data(), o_.ranks, words_, n_, width_, levels_, out);
  }

  int width_;
  double levels_;
  std::int64_t buckets_, words_;
  cm::Xoshiro base_;  // this rank's stream at the next step's first draw
  cm::Gf2Map step_;   // n draws
  BasicDeviceTensor<std::uint64_t> jumps_;
  DeviceWords gathered_;
};

// ---- 1-bit ------------------------------------------------------------------

class OneBit final : public DeviceCompressor {
 public:
  OneBit(const CompressorOptions& o, FlatLayout l, DeviceAllocator& a)
      : DeviceCompressor(o, std::move(l), a, true),
        most_((n_ + o.ranks - 1) / o.ranks),
        scales_((most_ + cm::kOneBitBucket - 1) / cm::kOneBitBucket),
        block_(scales_ + cm::words_for_bits(most_)),
        server_(a, {cm::chunk_begin(n_, o.ranks, o.rank + 1) - cm::chunk_begin(n_, o.ranks, o.rank)},
                MemTag::CommBuffers),
        send_(a, {block_ * o.ranks}, MemTag::CommBuffers),
        recv_(a, {block_ * o.ranks}, MemTag::CommBuffers) {}
  int rounds() const override { return 2; }
  const float* chunk_residual() const override { return server_.data(); }
  std::int64_t chunk_residual_size() const override { return server_.numel(); }

 private:
  std::uint32_t* mine() { return send_.data() + o_.rank * block_; }

  void do_encode(const float* g) override {
    float* x = residual_.data();
    with_residual(g);
    cm::onebit_compress(stream(), x, n_, o_.ranks, block_, scales_, send_.data(), x);
  }

  CompressRound do_round(int round) override {
    if (round == 0) {
      log(Collective::ReduceScatter, send_.numel());
      return {CompressCollective::AllToAll, send_.data(), recv_.data(), block_};
    }
    // Every rank's block of my chunk onto my server residual, compressed
    // again into my block (Karimireddy et al. 2019's server-side EF).
    cm::onebit_reduce(stream(), recv_.data(), o_.ranks, block_, scales_, server_.numel(), server_.data());
    cm::onebit_compress(stream(), server_.data(), server_.numel(), 1, block_, scales_, mine(), server_.data());
    log(Collective::AllGather, send_.numel());
    return {CompressCollective::AllGather, mine(), send_.data(), block_};
  }

  void do_decode(float* out) override {
    cm::onebit_decode(stream(), send_.data(), n_, o_.ranks, block_, scales_, out);
  }

  std::int64_t most_, scales_, block_;
  DeviceTensor server_;
  DeviceWords send_, recv_;
};

// ---- PowerSGD ---------------------------------------------------------------

class PowerSgd final : public DeviceCompressor {
 public:
  PowerSgd(const CompressorOptions& o, FlatLayout l, DeviceAllocator& a, Blas& blas)
      : DeviceCompressor(o, std::move(l), a, true), blas_(&blas), shared_(cm::mix(o.seed, cm::kPowerSgdSalt)) {
    PowerSgdLayout pl = powersgd_layout(layout_, o.method.rank);
    parts_ = std::move(pl.parts);
    columns_ = pl.columns;
    const std::int64_t q = pl.q_size;
    p_ = DeviceTensor(a, {pl.p_size}, MemTag::CommBuffers);
    q_ = DeviceTensor(a, {q}, MemTag::CommBuffers);
    flags_ = BasicDeviceTensor<int>(a, {std::max<std::int64_t>(columns_, 1)}, MemTag::CommBuffers);
    // The CPU's warm start: the shared stream's normals, in order.
    std::vector<float> init(static_cast<std::size_t>(q));
    for (float& v : init) v = static_cast<float>(shared_.normal());
    q_.upload(init);
  }
  int rounds() const override { return 2; }

 private:
  using Matrix = PowerSgdPart;  // `column`: the first of its r flags in flags_
  float* M(const Matrix& m) { return residual_.data() + m.t.offset; }

  void do_encode(const float* g) override {
    with_residual(g);  // M = g + e, kept until decode
    for (const Matrix& m : parts_) {
      if (m.t.matrix) {
        blas_->gemm(stream(), false, false, m.t.rows, m.r, m.t.cols, 1.0f, M(m), m.t.cols, q_.data() + m.q, m.r,
                    0.0f, p_.data() + m.p, m.r);
      } else {
        const auto bytes = static_cast<std::size_t>(4 * m.t.numel());
        STRATA_CUDA_CHECK(cudaMemcpyAsync(p_.data() + m.p, M(m), bytes, cudaMemcpyDeviceToDevice, stream()));
        STRATA_CUDA_CHECK(cudaMemsetAsync(M(m), 0, bytes, stream()));
      }
    }
  }

  CompressRound do_round(int round) override {
    if (round == 0) {
      log(Collective::AllReduce, p_.numel());
      return {CompressCollective::AllReduce, p_.data(), p_.data(), p_.numel()};
    }
    for (const Matrix& m : parts_) {
      if (!m.t.matrix) continue;
      cm::gram_schmidt(stream(), p_.data() + m.p, m.t.rows, m.r);
      blas_->gemm(stream(), true, false, m.t.cols, m.r, m.t.rows, 1.0f, M(m), m.t.cols, p_.data() + m.p, m.r, 0.0f,
                  q_.data() + m.q, m.r);
    }
    log(Collective::AllReduce, q_.numel());
    return {CompressCollective::AllReduce, q_.data(), q_.data(), q_.numel()};
  }

  void do_decode(float* out) override {
    const float share = 1.0f / static_cast<float>(o_.ranks);
    for (const Matrix& m : parts_) {
      float* o = out + m.t.offset;
      if (!m.t.matrix) {
        STRATA_CUDA_CHECK(cudaMemcpyAsync(o, p_.data() + m.p, static_cast<std::size_t>(4 * m.t.numel()),
                                          cudaMemcpyDeviceToDevice, stream()));
        continue;
      }
      blas_->gemm(stream(), false, true, m.t.rows, m.t.cols, m.r, 1.0f, p_.data() + m.p, m.r, q_.data() + m.q, m.r,
                  0.0f, o, m.t.cols);
      cm::subtract_scaled(stream(), o, share, M(m), m.t.numel());
      cm::zero_columns(stream(), q_.data() + m.q, m.t.cols, m.r, flags_.data() + m.column);
    }
    if (columns_ == 0) return;
    // A column of Q that came back zero would stay zero: the next warm
    // start takes a fresh one from the shared stream, as the CPU does (the
    // stream moves only then, so the host must see the flags: one wait per
    // step).
    const std::vector<int> flags = flags_.download();
    if (std::find(flags.begin(), flags.end(), 1) == flags.end()) return;
    std::vector<float> q = q_.download();
    for (const Matrix& m : parts_) {
      if (!m.t.matrix) continue;
      for (std::int64_t c = 0; c < m.r; ++c)
        if (flags[static_cast<std::size_t>(m.column + c)] != 0)
          for (std::int64_t i = 0; i < m.t.cols; ++i)
            q[static_cast<std::size_t>(m.q + i * m.r + c)] = static_cast<float>(shared_.normal());
    }
    q_.upload(q);
  }

  Blas* blas_;
  backend::Rng shared_;
  std::vector<Matrix> parts_;
  std::int64_t columns_ = 0;
  DeviceTensor p_;  // every matrix's P, then the vectors
  DeviceTensor q_;  // every matrix's Q: the warm start, then the all-reduced Q
  BasicDeviceTensor<int> flags_;
};

}  // namespace

// ---- DeviceCompressor --------------------------------------------------------

DeviceCompressor::DeviceCompressor(const CompressorOptions& o, FlatLayout layout, DeviceAllocator& alloc,
                                   bool residual)
    : o_(o), layout_(std::move(layout)), alloc_(&alloc) {
  if (o.ranks < 1 || o.rank < 0 || o.rank >= o.ranks)
    throw Error("device compressor: rank " + std::to_string(o.rank) + " outside a group of " + std::to_string(o.ranks));
  for (const FlatTensor& t : layout_) {
    if (t.offset != n_ || t.rows < 0 || t.cols < 1)
      throw Error("device compressor: the layout's tensors must follow each other from offset 0");
    n_ += t.numel();
  }
  if (n_ > std::numeric_limits<std::int32_t>::max())
    throw Error("device compressor: " + std::to_string(n_) + " gradients do not fit 32-bit indices");
  if (residual) residual_ = DeviceTensor(alloc, {n_}, MemTag::CommBuffers);
}

const float* DeviceCompressor::with_residual(const float* g) {
  if (residual_.empty()) return g;
  kernels::add(stream(), g, residual_.data(), n_);
  return residual_.data();
}

void DeviceCompressor::encode(const float* grad) {
  if (phase_ != Phase::Idle) throw Error("device compressor: encode before the last exchange was decoded");
  if (grad == nullptr && n_ > 0) throw Error("device compressor: encode got no gradient");
  exchanged_.clear();
  do_encode(grad);
  phase_ = Phase::Encoded;
  next_round_ = 0;
}

CompressRound DeviceCompressor::round(int r) {
  if (phase_ != Phase::Encoded || r != next_round_ || r >= rounds())
    throw Error("device compressor: round " + std::to_string(r) + " out of order");
  ++next_round_;
  return do_round(r);
}

void DeviceCompressor::decode(float* out) {
  if (phase_ != Phase::Encoded || next_round_ != rounds())
    throw Error("device compressor: decode before every round ran");
  if (out == nullptr && n_ > 0) throw Error("device compressor: decode got no output");
  do_decode(out);
  phase_ = Phase::Idle;
}

std::unique_ptr<DeviceCompressor> make_device_compressor(const CompressorOptions& o, FlatLayout layout,
                                                         DeviceAllocator& alloc, Blas& blas) {
  check_compressor_method(o.method, "device compressor");
  switch (o.method.method) {
    case CompressionMethod::TopK: return std::make_unique<TopK>(o, std::move(layout), alloc);
    case CompressionMethod::RandomK: return std::make_unique<RandomK>(o, std::move(layout), alloc);
    case CompressionMethod::Qsgd: return std::make_unique<Qsgd>(o, std::move(layout), alloc);
    case CompressionMethod::OneBit: return std::make_unique<OneBit>(o, std::move(layout), alloc);
    case CompressionMethod::PowerSgd: return std::make_unique<PowerSgd>(o, std::move(layout), alloc, blas);
    case CompressionMethod::None: break;
  }
  throw Error("device compressor: method none compresses nothing");
}

}  // namespace strata::backend::cuda
