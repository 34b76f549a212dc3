#pragma once
// Launch shapes and block reductions the .cu files share (nvcc only):
// grid-stride loops over n elements, one block per row, and the warp and
// block sums and maxima of fp32 values returned to every thread.
#include <cmath>
#include <cstdint>

namespace strata::backend::cuda::launch {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: at least one, at most 2^20.
inline unsigned blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < (1 << 20) ? b : (1 << 20)));
}

// Threads for one block per row of `dim` elements: a multiple of 32, at most 256.
inline int row_threads(std::int64_t dim) {
  const std::int64_t t = (dim + 31) / 32 * 32;
  return static_cast<int>(t < kThreads ? (t < 32 ? 32 : t) : kThreads);
}

__device__ inline std::int64_t global_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum (or maximum) over the block, returned to every thread. `sh`
// holds 32 floats; the leading barrier lets a caller reuse it at once.
__device__ inline float block_sum(float v, float* sh) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sh[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}
__device__ inline float block_max(float v, float* sh) {
  v = warp_max(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sh[lane] : -INFINITY;
    v = warp_max(v);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

}  // namespace strata::backend::cuda::launch
