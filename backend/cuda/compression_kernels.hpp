#pragma once
// The kernels of the CUDA compressors (compression_kernels.cu), enqueued on
// `stream`; compression.cpp strings them into the phases. Every one that
// builds or reads a message computes through compression_math.hpp, whose
// host runs are checked byte for byte against the CPU compressors. Internal
// to backend/cuda; plain C++17, no other Strata header but that one.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/compression_math.hpp"

namespace strata::backend::cuda::compression {

// ---- top-k --------------------------------------------------------------------
// Device scratch topk_select needs for n entries.
std::size_t topk_scratch_bytes(std::int64_t n, std::int64_t k);
// chosen[0..k) = the indices of the k largest |x| (ties: the lower index),
// in increasing order: a stable descending radix sort of magnitude_key(x)
// over the indices (CUB), then a sort of the first k.
void topk_select(cudaStream_t s, const float* x, std::int64_t n, std::int64_t k, void* scratch,
                 std::size_t scratch_bytes, std::int32_t* chosen);
// msg = chosen indices, then their fp16 values two to a word; residual
// (null without error feedback) loses what went.
void topk_pack(cudaStream_t s, const float* x, const std::int32_t* chosen, std::int64_t k,
               float* residual, std::uint32_t* msg);
// out[index] += value for one rank's k pairs (distinct indices: no races).
void topk_scatter_add(cudaStream_t s, const std::uint32_t* msg, std::int64_t k, float* out);

// ---- random-k -----------------------------------------------------------------
// values[q] = x[index[q]]·scale; residual[index[q]] = 0 (residual may be null).
void randomk_gather(cudaStream_t s, const float* x, const std::int32_t* index, std::int64_t k,
                    float scale, float* residual, float* values);
// out[index[q]] = values[q] (out zeroed first by the caller).
void randomk_scatter(cudaStream_t s, const std::int32_t* index, const float* values, std::int64_t k,
                     float* out);

// ---- QSGD ---------------------------------------------------------------------
// One thread per bucket, its stream state jumped from `base` (jumps: the
// maps of 512·2^l draws, l < jump_levels(buckets)); msg: qsgd_words words.
void qsgd_encode(cudaStream_t s, const float* x, std::int64_t n, Xoshiro base,
                 const std::uint64_t* jumps, double levels, int width, std::uint32_t* msg);
// out[i] = Σ_r (rank r's dequantized entry i), in rank order; rank r's
// message at msgs + r·words.
void qsgd_decode(cudaStream_t s, const std::uint32_t* msgs, int ranks, std::int64_t words,
                 std::int64_t n, int width, double levels, float* out);

// ---- 1-bit --------------------------------------------------------------------
// x (n entries) cut into `chunks` chunks (chunk_begin), chunk j into the
// block at blocks + j·block (`scales` scale words, then sign bits) with
// e = x − scale·sign (e may be x). One thread per (chunk, bucket).
void onebit_compress(cudaStream_t s, const float* x, std::int64_t n, int chunks, std::int64_t block,
                     std::int64_t scales, std::uint32_t* blocks, float* e);
// server[i] += Σ_j (block j's entry i), j = 0..ranks−1 in order (size entries).
void onebit_reduce(cudaStream_t s, const std::uint32_t* blocks, int ranks, std::int64_t block,
                   std::int64_t scales, std::int64_t size, float* server);
// out (n entries, chunks as onebit_compress cuts them) = every block's ±scale.
void onebit_decode(cudaStream_t s, const std::uint32_t* blocks, std::int64_t n, int ranks,
                   std::int64_t block, std::int64_t scales, float* out);

// ---- PowerSGD ------------------------------------------------------------------
// Gram–Schmidt on the r columns of P (rows × r, row-major), each projection
// twice, a column left with under 10⁻⁶ of its length set to zero (the CPU's
// orthogonalize; double sums in a block reduction: close to, not the bits
// of, the CPU's sequential sums). One block.
void gram_schmidt(cudaStream_t s, float* P, std::int64_t rows, std::int64_t r);
// e[i] −= o[i]·share.
void subtract_scaled(cudaStream_t s, const float* o, float share, float* e, std::int64_t n);
// flags[c] = 1 when column c of Q (rows × r, row-major) is all zero, else 0.
void zero_columns(cudaStream_t s, const float* q, std::int64_t rows, std::int64_t r, int* flags);

}  // namespace strata::backend::cuda::compression
