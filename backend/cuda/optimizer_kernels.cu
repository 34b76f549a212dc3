// Kernels of 8-bit Adam, LARS, LAMB, Adafactor and SM3 (optimizer_kernels.hpp
// says what each computes). The arithmetic is optimizer_math.hpp's; this file
// only decides which thread computes what and how sums are reduced. Built
// with -fmad=false (backend/CMakeLists.txt) so that every operation rounds
// as the CPU backend's: 8-bit Adam and SM3 then give the CPU's bits, and
// LARS, LAMB and Adafactor differ only by the order of their norms' sums.
#include <cstdint>

#include "backend/cuda/check.hpp"
#include "backend/cuda/optimizer_kernels.hpp"
#include "backend/cuda/launch.cuh"

namespace strata::backend::cuda::kernels {

namespace {

using launch::blocks_for;
using launch::global_index;
using launch::grid_stride;
using launch::kThreads;

constexpr int kPartialBlocks = 256;  // kOptimizerScratch holds two sums per block
static_assert(kOptimizerScratch == 2 * kPartialBlocks + 2, "scratch layout");

// Blocks of a reduction's first stage: a fixed number for a given n, so the
// sums are added in the same order at every step.
unsigned partial_blocks(std::int64_t n) {
  const unsigned b = blocks_for(n);
  return b < kPartialBlocks ? b : kPartialBlocks;
}

__device__ inline bool skipped(const int* skip) { return skip != nullptr && *skip != 0; }

// The sum (or maximum) over the block, returned to every thread; `sh` holds
// 32 values and the leading barrier lets a caller reuse it at once.
__device__ double block_sum(double v, double* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
// Of values >= 0 (moments, ν): the maximum is the same in any order.
__device__ float block_max(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = math::keep_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v = math::keep_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

// The first stage's `k` partial sums per block, block-major, added by one
// block in a fixed order into out[0..k).
__global__ void reduce_partials_kernel(const double* partials, int blocks, int k, double* out,
                                       const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  for (int q = 0; q < k; ++q) {
    double s = 0.0;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) s += partials[b * k + q];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[q] = s;
  }
}

void reduce_partials(cudaStream_t s, const double* partials, unsigned blocks, int k, double* out,
                     const int* skip) {
  reduce_partials_kernel<<<1, kThreads, 0, s>>>(partials, static_cast<int>(blocks), k, out, skip);
  STRATA_CUDA_LAUNCHED("reduce_partials_kernel");
}

// ---------------------------------------------------------------- 8-bit Adam

// Block b of the tensor: dequantize, AdamW in fp32, the block's new absmax,
// requantize. The fp32 moments are recomputed for the second pass rather than
// kept (a block may be larger than the threads' registers): the codes and the
// old absmax they are computed from are unchanged until then.
__global__ void adam8bit_kernel(float* p, const float* g, std::uint8_t* mc, std::uint8_t* vc,
                                float* m_max, float* v_max, std::int64_t n, std::int64_t block,
                                math::Adam8bitStep a, math::QuantMaps maps, const int* skip) {
  if (skipped(skip)) return;
  __shared__ math::QuantMaps q;
  __shared__ float sh[32];
  for (int i = threadIdx.x; i < math::kMapSize; i += blockDim.x) {
    q.signed_map[i] = maps.signed_map[i];
    q.unsigned_map[i] = maps.unsigned_map[i];
  }
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.x) * block;
  const std::int64_t len = n - b0 < block ? n - b0 : block;
  const float m_old = m_max[blockIdx.x], v_old = v_max[blockIdx.x];
  __syncthreads();
  float m_abs = 0.0f, v_abs = 0.0f;
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const std::int64_t k = b0 + j;
    float m, v;
    math::adam8bit_moments(a, q, mc[k], vc[k], m_old, v_old, g[k], m, v);
    p[k] = math::adam8bit_param(a, p[k], m, v);
    m_abs = math::keep_max(m_abs, fabsf(m));
    v_abs = math::keep_max(v_abs, v);
  }
  m_abs = block_max(m_abs, sh);
  v_abs = block_max(v_abs, sh);
  for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
    const std::int64_t k = b0 + j;
    float m, v;
    math::adam8bit_moments(a, q, mc[k], vc[k], m_old, v_old, g[k], m, v);
    mc[k] = math::quantize(q.signed_map, m, m_abs);
    vc[k] = math::quantize(q.unsigned_map, v, v_abs);
  }
  if (threadIdx.x == 0) {
    m_max[blockIdx.x] = m_abs;
    v_max[blockIdx.x] = v_abs;
  }
}

// ---------------------------------------------------------------- LARS

__global__ void lars_norms_kernel(const float* p, const float* g, std::int64_t n, double* partials,
                                  const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  double w2 = 0.0, g2 = 0.0;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    w2 += math::square(p[j]);
    g2 += math::square(g[j]);
  }
  w2 = block_sum(w2, sh);
  g2 = block_sum(g2, sh);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = w2;
    partials[2 * blockIdx.x + 1] = g2;
  }
}

__global__ void lars_update_kernel(float* p, const float* g, float* v, std::int64_t n,
                                   math::LarsStep a, const double* sums, const int* skip) {
  if (skipped(skip)) return;
  const float local_lr = math::lars_local_lr(a, sums[0], sums[1]);
  for (std::int64_t j = global_index(); j < n; j += grid_stride())
    math::lars_update(a, local_lr, p[j], g[j], v[j]);
}

// ---------------------------------------------------------------- LAMB

__global__ void lamb_moments_kernel(const float* p, const float* g, float* m, float* v,
                                    std::int64_t n, math::LambStep a, double* partials,
                                    const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  double w2 = 0.0, u2 = 0.0;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    float mj = m[j], vj = v[j];
    math::lamb_moments(a, g[j], mj, vj);
    m[j] = mj;
    v[j] = vj;
    const double u = math::lamb_direction(a, p[j], mj, vj);
    w2 += math::square(p[j]);
    u2 += u * u;
  }
  w2 = block_sum(w2, sh);
  u2 = block_sum(u2, sh);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = w2;
    partials[2 * blockIdx.x + 1] = u2;
  }
}

__global__ void lamb_update_kernel(float* p, const float* m, const float* v, std::int64_t n,
                                   math::LambStep a, const double* sums, const int* skip) {
  if (skipped(skip)) return;
  const double step = math::lamb_step_size(a, sums[0], sums[1]);
  for (std::int64_t j = global_index(); j < n; j += grid_stride())
    p[j] = math::lamb_update(step, p[j], math::lamb_direction(a, p[j], m[j], v[j]));
}

// ---------------------------------------------------------------- Adafactor

// One block per row: R_a decays with Σ_b g² + ε₁ (only this block touches R_a).
__global__ void adafactor_rows_kernel(const float* g, float* r, std::int64_t cols,
                                      math::AdafactorStep a, const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  const std::int64_t row = blockIdx.x;
  double s = 0.0;
  for (std::int64_t b = threadIdx.x; b < cols; b += blockDim.x) s += math::adafactor_sq(a, g[row * cols + b]);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) r[row] = math::adafactor_decay(a, r[row], s);
}

// One thread per column, down the rows in order (the CPU's order of the sum).
__global__ void adafactor_cols_kernel(const float* g, float* c, std::int64_t rows,
                                      std::int64_t cols, math::AdafactorStep a, const int* skip) {
  if (skipped(skip)) return;
  for (std::int64_t b = global_index(); b < cols; b += grid_stride()) {
    double s = 0.0;
    for (std::int64_t row = 0; row < rows; ++row) s += math::adafactor_sq(a, g[row * cols + b]);
    c[b] = math::adafactor_decay(a, c[b], s);
  }
}

// ΣR (double) into out[0], one block.
__global__ void adafactor_total_kernel(const float* r, std::int64_t rows, double* out,
                                       const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  double s = 0.0;
  for (std::int64_t a = threadIdx.x; a < rows; a += blockDim.x) s += r[a];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) out[0] = s;
}

// U of every element (factored from R, C and ΣR, or from a full V that
// decays here) and the blocks' partial ΣU².
__global__ void adafactor_u_kernel(const float* g, float* r, const float* c, std::int64_t rows,
                                   std::int64_t cols, math::AdafactorStep a, const double* total,
                                   float* u, double* partials, const int* skip) {
  if (skipped(skip)) return;
  __shared__ double sh[32];
  const std::int64_t n = rows * cols;
  double u2 = 0.0;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    float uj;
    if (c != nullptr) {
      uj = math::adafactor_factored_u(g[j], r[j / cols], c[j % cols], total[0]);
    } else {
      float vj = r[j];
      uj = math::adafactor_full_u(a, g[j], vj);
      r[j] = vj;
    }
    u[j] = uj;
    u2 += math::square(uj);
  }
  u2 = block_sum(u2, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = u2;
}

__global__ void adafactor_update_kernel(float* p, const float* u, std::int64_t n,
                                        math::AdafactorStep a, const double* u2, const int* skip) {
  if (skipped(skip)) return;
  const double scale = math::adafactor_scale(a, u2[0], n);
  for (std::int64_t j = global_index(); j < n; j += grid_stride())
    p[j] = math::adafactor_update(scale, p[j], u[j]);
}

// ---------------------------------------------------------------- SM3

// New column covers max_a ν_ab from the old covers, one thread per column
// (before the rows kernel replaces R).
__global__ void sm3_cols_kernel(const float* g, const float* r, const float* c, std::int64_t rows,
                                std::int64_t cols, float* new_c, const int* skip) {
  if (skipped(skip)) return;
  for (std::int64_t b = global_index(); b < cols; b += grid_stride()) {
    float mx = 0.0f;
    for (std::int64_t row = 0; row < rows; ++row)
      mx = math::keep_max(mx, math::sm3_nu(r[row], c[b], g[row * cols + b]));
    new_c[b] = mx;
  }
}

// One block per row: the update of its elements and the new R_a = max_b ν_ab.
__global__ void sm3_rows_kernel(float* p, const float* g, float* r, const float* c,
                                std::int64_t cols, float lr, const int* skip) {
  if (skipped(skip)) return;
  __shared__ float sh[32];
  const std::int64_t row = blockIdx.x;
  const float ra = r[row];
  float mx = 0.0f;
  for (std::int64_t b = threadIdx.x; b < cols; b += blockDim.x) {
    const std::int64_t j = row * cols + b;
    const float nu = math::sm3_nu(ra, c[b], g[j]);
    p[j] = math::sm3_apply(lr, p[j], g[j], nu);
    mx = math::keep_max(mx, nu);
  }
  mx = block_max(mx, sh);
  if (threadIdx.x == 0) r[row] = mx;
}

__global__ void sm3_copy_kernel(const float* from, float* to, std::int64_t n, const int* skip) {
  if (skipped(skip)) return;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) to[j] = from[j];
}

// A tensor that is not a matrix: Adagrad, ν += g².
__global__ void sm3_full_kernel(float* p, const float* g, float* r, std::int64_t n, float lr,
                                const int* skip) {
  if (skipped(skip)) return;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    const float nu = r[j] + g[j] * g[j];
    r[j] = nu;
    p[j] = math::sm3_apply(lr, p[j], g[j], nu);
  }
}

}  // namespace

void adam8bit_step(cudaStream_t s, float* p, const float* g, std::uint8_t* mc, std::uint8_t* vc,
                   float* m_max, float* v_max, std::int64_t n, std::int64_t block,
                   const math::Adam8bitStep& a, const math::QuantMaps& maps, const int* skip) {
  if (n <= 0) return;
  const std::int64_t blocks = (n + block - 1) / block;
  const int threads = block < kThreads ? static_cast<int>((block + 31) / 32 * 32) : kThreads;
  adam8bit_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(p, g, mc, vc, m_max, v_max, n,
                                                                    block, a, maps, skip);
  STRATA_CUDA_LAUNCHED("adam8bit_kernel");
}

void lars_step(cudaStream_t s, float* p, const float* g, float* v, std::int64_t n,
               const math::LarsStep& a, double* scratch, const int* skip) {
  if (n <= 0) return;
  const unsigned pb = partial_blocks(n);
  double* sums = scratch + 2 * kPartialBlocks;
  lars_norms_kernel<<<pb, kThreads, 0, s>>>(p, g, n, scratch, skip);
  STRATA_CUDA_LAUNCHED("lars_norms_kernel");
  reduce_partials(s, scratch, pb, 2, sums, skip);
  lars_update_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, g, v, n, a, sums, skip);
  STRATA_CUDA_LAUNCHED("lars_update_kernel");
}

void lamb_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
               const math::LambStep& a, double* scratch, const int* skip) {
  if (n <= 0) return;
  const unsigned pb = partial_blocks(n);
  double* sums = scratch + 2 * kPartialBlocks;
  lamb_moments_kernel<<<pb, kThreads, 0, s>>>(p, g, m, v, n, a, scratch, skip);
  STRATA_CUDA_LAUNCHED("lamb_moments_kernel");
  reduce_partials(s, scratch, pb, 2, sums, skip);
  lamb_update_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, m, v, n, a, sums, skip);
  STRATA_CUDA_LAUNCHED("lamb_update_kernel");
}

void adafactor_step(cudaStream_t s, float* p, const float* g, float* r, float* c,
                    std::int64_t rows, std::int64_t cols, const math::AdafactorStep& a, float* u,
                    double* scratch, const int* skip) {
  const std::int64_t n = rows * cols;
  if (n <= 0) return;
  double* sums = scratch + 2 * kPartialBlocks;  // [0] ΣR, [1] ΣU²
  if (c != nullptr) {
    adafactor_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(g, r, cols, a, skip);
    STRATA_CUDA_LAUNCHED("adafactor_rows_kernel");
    adafactor_cols_kernel<<<blocks_for(cols), kThreads, 0, s>>>(g, c, rows, cols, a, skip);
    STRATA_CUDA_LAUNCHED("adafactor_cols_kernel");
    adafactor_total_kernel<<<1, kThreads, 0, s>>>(r, rows, sums, skip);
    STRATA_CUDA_LAUNCHED("adafactor_total_kernel");
  }
  const unsigned pb = partial_blocks(n);
  adafactor_u_kernel<<<pb, kThreads, 0, s>>>(g, r, c, rows, cols, a, sums, u, scratch, skip);
  STRATA_CUDA_LAUNCHED("adafactor_u_kernel");
  reduce_partials(s, scratch, pb, 1, sums + 1, skip);
  adafactor_update_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, u, n, a, sums + 1, skip);
  STRATA_CUDA_LAUNCHED("adafactor_update_kernel");
}

void sm3_step(cudaStream_t s, float* p, const float* g, float* r, float* c, std::int64_t rows,
              std::int64_t cols, float lr, float* new_c, const int* skip) {
  const std::int64_t n = rows * cols;
  if (n <= 0) return;
  if (c == nullptr) {
    sm3_full_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, g, r, n, lr, skip);
    STRATA_CUDA_LAUNCHED("sm3_full_kernel");
    return;
  }
  sm3_cols_kernel<<<blocks_for(cols), kThreads, 0, s>>>(g, r, c, rows, cols, new_c, skip);
  STRATA_CUDA_LAUNCHED("sm3_cols_kernel");
  sm3_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(p, g, r, c, cols, lr, skip);
  STRATA_CUDA_LAUNCHED("sm3_rows_kernel");
  sm3_copy_kernel<<<blocks_for(cols), kThreads, 0, s>>>(new_c, c, cols, skip);
  STRATA_CUDA_LAUNCHED("sm3_copy_kernel");
}

}  // namespace strata::backend::cuda::kernels
