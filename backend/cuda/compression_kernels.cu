// Kernels of the CUDA compressors (compression_kernels.hpp says what each
// computes). The arithmetic is compression_math.hpp's; what is here is the
// split into threads: one thread per bucket where a bucket's sum or random
// stream is sequential (QSGD, 1-bit: the CPU's order, so the same bits),
// one per entry or message word elsewhere.
//
// Not yet run on a GPU: the host runs of the same functions are checked
// against the CPU compressors (compression_math_test.cpp); the device runs
// are checked by compression_test.cpp where a GPU exists.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/check.hpp"
#include "backend/cuda/compression_kernels.hpp"
#include "backend/cuda/launch.cuh"

namespace strata::backend::cuda::compression {

namespace {

using launch::blocks_for;
using launch::global_index;
using launch::grid_stride;
using launch::kThreads;

// Bits CUB must sort to order the values 0..n−1.
int bits_for(std::int64_t n) {
  int b = 1;
  while ((std::int64_t{1} << b) < n) ++b;
  return b;
}

// The radix sorts' pieces inside one scratch buffer, each 256-byte aligned.
struct TopKScratch {
  std::size_t keys_in, keys_out, idx_in, idx_out, cub, cub_bytes, total;
};
std::size_t aligned(std::size_t b) { return (b + 255) / 256 * 256; }
TopKScratch topk_layout(std::int64_t n, std::int64_t k) {
  std::size_t pairs = 0, keys = 0;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(
      nullptr, pairs, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr), static_cast<int>(n), 0, 31));
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, keys, static_cast<const std::uint32_t*>(nullptr),
                                                   static_cast<std::uint32_t*>(nullptr), static_cast<int>(k), 0,
                                                   bits_for(n)));
  const std::size_t arr = aligned(4 * static_cast<std::size_t>(n));
  TopKScratch l{};
  l.keys_in = 0;
  l.keys_out = arr;
  l.idx_in = 2 * arr;
  l.idx_out = 3 * arr;
  l.cub = 4 * arr;
  l.cub_bytes = aligned(pairs > keys ? pairs : keys);
  l.total = l.cub + l.cub_bytes;
  return l;
}

__global__ void topk_keys_kernel(const float* x, std::int64_t n, std::uint32_t* keys, std::uint32_t* idx) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    keys[i] = magnitude_key(x[i]);
    idx[i] = static_cast<std::uint32_t>(i);
  }
}

__global__ void topk_pack_kernel(const float* x, const std::int32_t* chosen, std::int64_t k, float* residual,
                                 std::uint32_t* msg) {
  // Word w of the values holds entries 2w and 2w + 1: one thread writes it
  // whole (and the residuals of those two distinct indices).
  const std::int64_t value_words = (k + 1) / 2;
  for (std::int64_t t = global_index(); t < k + value_words; t += grid_stride()) {
    if (t < k) msg[t] = static_cast<std::uint32_t>(chosen[t]);
    else msg[t] = topk_value_word(x, chosen, k, t - k, residual);
  }
}

__global__ void topk_scatter_add_kernel(const std::uint32_t* msg, std::int64_t k, float* out) {
  for (std::int64_t j = global_index(); j < k; j += grid_stride()) {
    float& o = out[msg[j]];
    o = fadd(o, topk_value(msg, k, j));
  }
}

__global__ void randomk_gather_kernel(const float* x, const std::int32_t* index, std::int64_t k, float scale,
                                      float* residual, float* values) {
  for (std::int64_t q = global_index(); q < k; q += grid_stride()) {
    values[q] = fmul(x[index[q]], scale);
    if (residual != nullptr) residual[index[q]] = 0.0f;
  }
}

__global__ void randomk_scatter_kernel(const std::int32_t* index, const float* values, std::int64_t k, float* out) {
  for (std::int64_t q = global_index(); q < k; q += grid_stride()) out[index[q]] = values[q];
}

__global__ void qsgd_encode_kernel(const float* x, std::int64_t n, Xoshiro base, const std::uint64_t* jumps,
                                   double levels, int width, std::uint32_t* msg) {
  const std::int64_t buckets = qsgd_buckets(n);
  for (std::int64_t b = global_index(); b < buckets; b += grid_stride()) {
    const std::int64_t lo = b * kQsgdBucket, hi = lo + kQsgdBucket < n ? lo + kQsgdBucket : n;
    qsgd_encode_bucket(x, lo, hi, jump_buckets(jumps, b, base), levels, width, msg + b,
                       msg + buckets + lo * width / 32);
  }
}

__global__ void qsgd_decode_kernel(const std::uint32_t* msgs, int ranks, std::int64_t words, std::int64_t n,
                                   int width, double levels, float* out) {
  const std::int64_t buckets = qsgd_buckets(n);
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) acc = fadd(acc, qsgd_value(msgs + r * words, buckets, i, width, levels));
    out[i] = acc;
  }
}

__global__ void onebit_compress_kernel(const float* x, std::int64_t n, int chunks, std::int64_t block,
                                       std::int64_t scales, std::uint32_t* blocks, float* e) {
  // Thread t: chunk t / scales, its bucket t % scales (scales: the buckets
  // of the largest chunk; smaller chunks leave their last threads idle).
  for (std::int64_t t = global_index(); t < chunks * scales; t += grid_stride()) {
    const int j = static_cast<int>(t / scales);
    const std::int64_t begin = chunk_begin(n, chunks, j), size = chunk_begin(n, chunks, j + 1) - begin;
    const std::int64_t lo = (t % scales) * kOneBitBucket;
    if (lo >= size) continue;
    const std::int64_t hi = lo + kOneBitBucket < size ? lo + kOneBitBucket : size;
    std::uint32_t* blk = blocks + j * block;
    onebit_compress_bucket(x + begin, lo, hi, blk, blk + scales + lo / 32, e + begin);
  }
}

__global__ void onebit_reduce_kernel(const std::uint32_t* blocks, int ranks, std::int64_t block,
                                     std::int64_t scales, std::int64_t size, float* server) {
  for (std::int64_t i = global_index(); i < size; i += grid_stride()) {
    float acc = server[i];
    for (int j = 0; j < ranks; ++j) acc = fadd(acc, onebit_value(blocks + j * block, scales, i));
    server[i] = acc;
  }
}

__global__ void onebit_decode_kernel(const std::uint32_t* blocks, std::int64_t n, int ranks, std::int64_t block,
                                     std::int64_t scales, float* out) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    int j = static_cast<int>(i * ranks / n);  // a guess, within one of the chunk
    while (j + 1 < ranks && chunk_begin(n, ranks, j + 1) <= i) ++j;
    while (j > 0 && chunk_begin(n, ranks, j) > i) --j;
    // 0 + value, as the CPU adds onto zeros (−0 becomes +0).
    out[i] = fadd(0.0f, onebit_value(blocks + j * block, scales, i - chunk_begin(n, ranks, j)));
  }
}

// The sum of v over the block (blockDim.x = kThreads) in double, to every thread.
__device__ double block_sum(double v, double* sh) {
  __syncthreads();
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] = dadd(sh[threadIdx.x], sh[threadIdx.x + w]);
    __syncthreads();
  }
  return sh[0];
}

__global__ void gram_schmidt_kernel(float* P, std::int64_t rows, std::int64_t r) {
  __shared__ double sh[kThreads];
  auto dot = [&](std::int64_t a, std::int64_t b) {
    double s = 0;
    for (std::int64_t i = threadIdx.x; i < rows; i += kThreads)
      s = dadd(s, dmul(static_cast<double>(P[i * r + a]), static_cast<double>(P[i * r + b])));
    return block_sum(s, sh);
  };
  for (std::int64_t j = 0; j < r; ++j) {
    const double before = dsqrt(dot(j, j));
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t l = 0; l < j; ++l) {
        const float d = to_float(dot(l, j));
        for (std::int64_t i = threadIdx.x; i < rows; i += kThreads)
          P[i * r + j] = fsub(P[i * r + j], fmul(d, P[i * r + l]));
        __syncthreads();
      }
    const double norm = dsqrt(dot(j, j));
    const float inv = norm > 1e-6 * before ? to_float(1.0 / norm) : 0.0f;
    for (std::int64_t i = threadIdx.x; i < rows; i += kThreads) P[i * r + j] = fmul(P[i * r + j], inv);
    __syncthreads();
  }
}

__global__ void subtract_scaled_kernel(const float* o, float share, float* e, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) e[i] = fsub(e[i], fmul(o[i], share));
}

__global__ void zero_columns_kernel(const float* q, std::int64_t rows, std::int64_t r, int* flags) {
  for (std::int64_t c = global_index(); c < r; c += grid_stride()) {
    int zero = 1;
    for (std::int64_t i = 0; i < rows && zero; ++i) zero = q[i * r + c] == 0.0f;
    flags[c] = zero;
  }
}

}  // namespace

#define STRATA_LAUNCH(kernel, grid, ...)                      \
  do {                                                        \
    kernel<<<(grid), kThreads, 0, s>>>(__VA_ARGS__);          \
    STRATA_CUDA_LAUNCHED(#kernel);                            \
  } while (0)

std::size_t topk_scratch_bytes(std::int64_t n, std::int64_t k) { return topk_layout(n, k).total; }

void topk_select(cudaStream_t s, const float* x, std::int64_t n, std::int64_t k, void* scratch,
                 std::size_t scratch_bytes, std::int32_t* chosen) {
  const TopKScratch l = topk_layout(n, k);
  if (scratch_bytes < l.total) STRATA_CUDA_CHECK(cudaErrorInvalidValue);
  auto* base = static_cast<unsigned char*>(scratch);
  auto* keys_in = reinterpret_cast<std::uint32_t*>(base + l.keys_in);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(base + l.keys_out);
  auto* idx_in = reinterpret_cast<std::uint32_t*>(base + l.idx_in);
  auto* idx_out = reinterpret_cast<std::uint32_t*>(base + l.idx_out);
  STRATA_LAUNCH(topk_keys_kernel, blocks_for(n), x, n, keys_in, idx_in);
  std::size_t bytes = l.cub_bytes;
  // Keys use bits 0..30 (the sign is cleared); the sort is stable, so equal
  // |x| keep increasing indices: the CPU's tie rule.
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(base + l.cub, bytes, keys_in, keys_out, idx_in,
                                                              idx_out, static_cast<int>(n), 0, 31, s));
  bytes = l.cub_bytes;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(base + l.cub, bytes, idx_out,
                                                   reinterpret_cast<std::uint32_t*>(chosen), static_cast<int>(k),
                                                   0, bits_for(n), s));
}

void topk_pack(cudaStream_t s, const float* x, const std::int32_t* chosen, std::int64_t k, float* residual,
               std::uint32_t* msg) {
  STRATA_LAUNCH(topk_pack_kernel, blocks_for(k + (k + 1) / 2), x, chosen, k, residual, msg);
}

void topk_scatter_add(cudaStream_t s, const std::uint32_t* msg, std::int64_t k, float* out) {
  STRATA_LAUNCH(topk_scatter_add_kernel, blocks_for(k), msg, k, out);
}

void randomk_gather(cudaStream_t s, const float* x, const std::int32_t* index, std::int64_t k, float scale,
                    float* residual, float* values) {
  STRATA_LAUNCH(randomk_gather_kernel, blocks_for(k), x, index, k, scale, residual, values);
}

void randomk_scatter(cudaStream_t s, const std::int32_t* index, const float* values, std::int64_t k, float* out) {
  STRATA_LAUNCH(randomk_scatter_kernel, blocks_for(k), index, values, k, out);
}

void qsgd_encode(cudaStream_t s, const float* x, std::int64_t n, Xoshiro base, const std::uint64_t* jumps,
                 double levels, int width, std::uint32_t* msg) {
  STRATA_LAUNCH(qsgd_encode_kernel, blocks_for(qsgd_buckets(n)), x, n, base, jumps, levels, width, msg);
}

void qsgd_decode(cudaStream_t s, const std::uint32_t* msgs, int ranks, std::int64_t words, std::int64_t n,
                 int width, double levels, float* out) {
  STRATA_LAUNCH(qsgd_decode_kernel, blocks_for(n), msgs, ranks, words, n, width, levels, out);
}

void onebit_compress(cudaStream_t s, const float* x, std::int64_t n, int chunks, std::int64_t block,
                     std::int64_t scales, std::uint32_t* blocks, float* e) {
  STRATA_LAUNCH(onebit_compress_kernel, blocks_for(chunks * scales), x, n, chunks, block, scales, blocks, e);
}

void onebit_reduce(cudaStream_t s, const std::uint32_t* blocks, int ranks, std::int64_t block,
                   std::int64_t scales, std::int64_t size, float* server) {
  STRATA_LAUNCH(onebit_reduce_kernel, blocks_for(size), blocks, ranks, block, scales, size, server);
}

void onebit_decode(cudaStream_t s, const std::uint32_t* blocks, std::int64_t n, int ranks, std::int64_t block,
                   std::int64_t scales, float* out) {
  STRATA_LAUNCH(onebit_decode_kernel, blocks_for(n), blocks, n, ranks, block, scales, out);
}

void gram_schmidt(cudaStream_t s, float* P, std::int64_t rows, std::int64_t r) {
  STRATA_LAUNCH(gram_schmidt_kernel, 1u, P, rows, r);
}

void subtract_scaled(cudaStream_t s, const float* o, float share, float* e, std::int64_t n) {
  STRATA_LAUNCH(subtract_scaled_kernel, blocks_for(n), o, share, e, n);
}

void zero_columns(cudaStream_t s, const float* q, std::int64_t rows, std::int64_t r, int* flags) {
  STRATA_LAUNCH(zero_columns_kernel, blocks_for(r), q, rows, r, flags);
}

}  // namespace strata::backend::cuda::compression
