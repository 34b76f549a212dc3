// bf16 kernels of the mixed-precision step (kernels_bf16.hpp says what each
// computes). The same launch shapes as kernels.cu (one block per row for
// row-wise ops, grid-stride loops for element-wise ones); every value is
// loaded as fp32, the arithmetic is fp32 (bf16_math.hpp's element functions)
// and each bf16 output is rounded once. kernels.cu (fp32) is untouched.
#include <cmath>

#include "backend/cuda/bf16_math.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_bf16.hpp"
#include "backend/cuda/launch.cuh"

namespace strata::backend::cuda::kernels {

namespace {

using math::to_bf16;
using math::to_float;

using launch::block_max;
using launch::block_sum;
using launch::blocks_for;
using launch::global_index;
using launch::grid_stride;
using launch::kThreads;
using launch::row_threads;

__device__ inline float ld(const Bf16* p, std::int64_t i) { return to_float(p[i]); }

// ---------------------------------------------------------------- casts

__global__ void cast_to_bf16_kernel(const float* x, Bf16* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) y[i] = to_bf16(x[i]);
}
__global__ void cast_to_float_kernel(const Bf16* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) y[i] = to_float(x[i]);
}

// ---------------------------------------------------------------- embedding

__global__ void embedding_forward_kernel(const std::int32_t* tokens, const Bf16* table, const Bf16* pos,
                                         Bf16* y, std::int64_t n, std::int64_t seq, std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < n * hidden; e += grid_stride()) {
    const std::int64_t t = e / hidden, i = e % hidden;
    float v = ld(table, static_cast<std::int64_t>(tokens[t]) * hidden + i);
    if (pos != nullptr) v += ld(pos, (t % seq) * hidden + i);
    y[e] = to_bf16(v);
  }
}

__global__ void embedding_table_grad_kernel(const std::int32_t* tokens, const Bf16* dy, float* dtable,
                                            std::int64_t n, std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < n * hidden; e += grid_stride()) {
    const std::int64_t t = e / hidden, i = e % hidden;
    atomicAdd(dtable + static_cast<std::int64_t>(tokens[t]) * hidden + i, ld(dy, e));
  }
}

__global__ void embedding_pos_grad_kernel(const Bf16* dy, float* dpos, std::int64_t batch, std::int64_t seq,
                                          std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < seq * hidden; e += grid_stride()) {
    float acc = 0.0f;
    for (std::int64_t b = 0; b < batch; ++b) acc += ld(dy, b * seq * hidden + e);
    dpos[e] += acc;
  }
}

// ---------------------------------------------------------------- norms

__device__ void row_moments(const Bf16* xr, std::int64_t dim, float eps, float* sh, float& mean, float& rstd) {
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += ld(xr, i);
  mean = block_sum(s, sh) / static_cast<float>(dim);
  float v = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = ld(xr, i) - mean;
    v += d * d;
  }
  rstd = 1.0f / sqrtf(block_sum(v, sh) / static_cast<float>(dim) + eps);
}

__device__ float rms_scale(const Bf16* xr, std::int64_t dim, float eps, float* sh) {
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += ld(xr, i) * ld(xr, i);
  return 1.0f / sqrtf(block_sum(s, sh) / static_cast<float>(dim) + eps);
}

__global__ void layernorm_forward_kernel(const Bf16* x, const Bf16* gamma, const Bf16* beta, Bf16* y,
                                         std::int64_t dim, float eps) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const Bf16* xr = x + r * dim;
  Bf16* yr = y + r * dim;
  float mean, rstd;
  row_moments(xr, dim, eps, sh, mean, rstd);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = to_bf16(math::layernorm(ld(xr, i), mean, rstd, ld(gamma, i), ld(beta, i)));
}

__global__ void layernorm_backward_kernel(const Bf16* x, const Bf16* gamma, const Bf16* dy, Bf16* dx,
                                          std::int64_t dim, float eps, float* stats) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const Bf16* xr = x + r * dim;
  const Bf16* g = dy + r * dim;
  Bf16* dxr = dx + r * dim;
  float mean, rstd;
  row_moments(xr, dim, eps, sh, mean, rstd);
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float gh = ld(g, i) * ld(gamma, i);
    sg += gh;
    sgx += gh * (ld(xr, i) - mean) * rstd;
  }
  const float mg = block_sum(sg, sh) / static_cast<float>(dim);
  const float mgx = block_sum(sgx, sh) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dxr[i] = to_bf16(ld(dxr, i) + math::layernorm_dx(ld(xr, i), ld(g, i), ld(gamma, i), mean, rstd, mg, mgx));
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

__global__ void rmsnorm_forward_kernel(const Bf16* x, const Bf16* gamma, Bf16* y, std::int64_t dim, float eps) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const Bf16* xr = x + r * dim;
  Bf16* yr = y + r * dim;
  const float rr = rms_scale(xr, dim, eps, sh);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = to_bf16(math::rmsnorm(ld(xr, i), rr, ld(gamma, i)));
}

__global__ void rmsnorm_backward_kernel(const Bf16* x, const Bf16* gamma, const Bf16* dy, Bf16* dx,
                                        std::int64_t dim, float eps, float* stats) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const Bf16* xr = x + r * dim;
  const Bf16* g = dy + r * dim;
  Bf16* dxr = dx + r * dim;
  const float rr = rms_scale(xr, dim, eps, sh);
  float sgx = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) sgx += ld(g, i) * ld(gamma, i) * ld(xr, i) * rr;
  const float mgx = block_sum(sgx, sh) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dxr[i] = to_bf16(ld(dxr, i) + math::rmsnorm_dx(ld(xr, i), ld(g, i), ld(gamma, i), rr, mgx));
  if (threadIdx.x == 0) stats[r] = rr;
}

// Column sums over row chunks into fp32 (kernels.cu's scheme): block (32, 8)
// covers 32 columns of kColumnChunk rows, partial sums added atomically.
constexpr int kColumnChunk = 128;
enum class Column { Plain, LayerNorm, Rms };

template <Column kMode>
__global__ void column_sums_kernel(const Bf16* a, const Bf16* x, const float* stats, std::int64_t rows,
                                   std::int64_t cols, float* out, float* out2) {
  __shared__ float s1[8][33], s2[8][33];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kColumnChunk;
  const std::int64_t r1 = r0 + kColumnChunk < rows ? r0 + kColumnChunk : rows;
  float acc = 0.0f, acc2 = 0.0f;
  if (c < cols) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float v = ld(a, r * cols + c);
      if constexpr (kMode == Column::Plain) {
        acc += v;
      } else if constexpr (kMode == Column::LayerNorm) {
        acc += v * (ld(x, r * cols + c) - stats[2 * r]) * stats[2 * r + 1];
        acc2 += v;
      } else {
        acc += v * ld(x, r * cols + c) * stats[r];
      }
    }
  }
  s1[threadIdx.y][threadIdx.x] = acc;
  s2[threadIdx.y][threadIdx.x] = acc2;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f, t2 = 0.0f;
    for (int k = 0; k < 8; ++k) {
      t += s1[k][threadIdx.x];
      t2 += s2[k][threadIdx.x];
    }
    atomicAdd(out + c, t);
    if constexpr (kMode == Column::LayerNorm) atomicAdd(out2 + c, t2);
  }
}

template <Column kMode>
void column_sums(cudaStream_t s, const Bf16* a, const Bf16* x, const float* stats, std::int64_t rows,
                 std::int64_t cols, float* out, float* out2) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                  static_cast<unsigned>((rows + kColumnChunk - 1) / kColumnChunk));
  column_sums_kernel<kMode><<<grid, dim3(32, 8), 0, s>>>(a, x, stats, rows, cols, out, out2);
  STRATA_CUDA_LAUNCHED("column_sums_kernel (bf16)");
}

// ---------------------------------------------------------------- linear pieces

__global__ void broadcast_rows_kernel(const Bf16* b, Bf16* y, std::int64_t rows, std::int64_t cols,
                                      bool accumulate) {
  for (std::int64_t e = global_index(); e < rows * cols; e += grid_stride()) {
    const float v = ld(b, e % cols);
    y[e] = accumulate ? to_bf16(ld(y, e) + v) : b[e % cols];
  }
}

// ---------------------------------------------------------------- softmax

// The exponentials are recomputed for the output rather than stored in bf16
// between the passes: one rounding per probability.
__global__ void causal_softmax_forward_kernel(Bf16* p, std::int64_t seq) {
  __shared__ float sh[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t valid = row % seq + 1;
  Bf16* pr = p + row * seq;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, ld(pr, j));
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(ld(pr, j) - mx);
  const float inv = 1.0f / block_sum(sum, sh);
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    pr[j] = j < valid ? to_bf16(expf(ld(pr, j) - mx) * inv) : Bf16{0};
}

__global__ void causal_softmax_backward_kernel(const Bf16* p, Bf16* g, std::int64_t seq) {
  __shared__ float sh[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t valid = row % seq + 1;
  const Bf16* pr = p + row * seq;
  Bf16* gr = g + row * seq;
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) dot += ld(pr, j) * ld(gr, j);
  dot = block_sum(dot, sh);
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    gr[j] = j < valid ? to_bf16(ld(pr, j) * (ld(gr, j) - dot)) : Bf16{0};
}

// ---------------------------------------------------------------- activations

__global__ void gelu_forward_kernel(const Bf16* x, Bf16* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) y[i] = to_bf16(math::gelu(ld(x, i)));
}

__global__ void gelu_backward_kernel(const Bf16* x, const Bf16* dy, Bf16* dx, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride())
    dx[i] = to_bf16(math::gelu_grad(ld(x, i), ld(dy, i)));
}

__global__ void swiglu_forward_kernel(const Bf16* gu, Bf16* y, std::int64_t rows, std::int64_t f) {
  for (std::int64_t e = global_index(); e < rows * f; e += grid_stride()) {
    const std::int64_t r = e / f, i = e % f;
    y[e] = to_bf16(math::swiglu(ld(gu, r * 2 * f + i), ld(gu, r * 2 * f + f + i)));
  }
}

__global__ void swiglu_backward_kernel(const Bf16* gu, const Bf16* dy, Bf16* dgu, std::int64_t rows,
                                       std::int64_t f) {
  for (std::int64_t e = global_index(); e < rows * f; e += grid_stride()) {
    const std::int64_t r = e / f, i = e % f;
    float dg = 0.0f, du = 0.0f;
    math::swiglu_grad(ld(gu, r * 2 * f + i), ld(gu, r * 2 * f + f + i), ld(dy, e), dg, du);
    dgu[r * 2 * f + f + i] = to_bf16(du);
    dgu[r * 2 * f + i] = to_bf16(dg);
  }
}

__global__ void add_kernel(const Bf16* x, Bf16* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) y[i] = to_bf16(ld(y, i) + ld(x, i));
}

}  // namespace

void cast(cudaStream_t s, const float* x, Bf16* y, std::int64_t n) {
  if (n == 0) return;
  cast_to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  STRATA_CUDA_LAUNCHED("cast_to_bf16_kernel");
}

void cast(cudaStream_t s, const Bf16* x, float* y, std::int64_t n) {
  if (n == 0) return;
  cast_to_float_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  STRATA_CUDA_LAUNCHED("cast_to_float_kernel");
}

void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const Bf16* table, const Bf16* pos, Bf16* y,
                       std::int64_t batch, std::int64_t seq, std::int64_t hidden) {
  const std::int64_t n = batch * seq;
  if (n * hidden == 0) return;
  embedding_forward_kernel<<<blocks_for(n * hidden), kThreads, 0, s>>>(tokens, table, pos, y, n, seq, hidden);
  STRATA_CUDA_LAUNCHED("embedding_forward_kernel (bf16)");
}

void embedding_backward(cudaStream_t s, const std::int32_t* tokens, const Bf16* dy, float* dtable, float* dpos,
                        std::int64_t batch, std::int64_t seq, std::int64_t hidden) {
  const std::int64_t n = batch * seq;
  if (n * hidden == 0) return;
  if (dtable != nullptr) {
    embedding_table_grad_kernel<<<blocks_for(n * hidden), kThreads, 0, s>>>(tokens, dy, dtable, n, hidden);
    STRATA_CUDA_LAUNCHED("embedding_table_grad_kernel (bf16)");
  }
  if (dpos != nullptr) {
    embedding_pos_grad_kernel<<<blocks_for(seq * hidden), kThreads, 0, s>>>(dy, dpos, batch, seq, hidden);
    STRATA_CUDA_LAUNCHED("embedding_pos_grad_kernel (bf16)");
  }
}

void layernorm_forward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* beta, Bf16* y,
                       std::int64_t rows, std::int64_t dim, float eps) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, beta, y, dim, eps);
  STRATA_CUDA_LAUNCHED("layernorm_forward_kernel (bf16)");
}

void layernorm_backward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* dy, Bf16* dx, float* dgamma,
                        float* dbeta, std::int64_t rows, std::int64_t dim, float eps, float* stats) {
  if (rows == 0) return;
  layernorm_backward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, dy, dx, dim, eps,
                                                                                     stats);
  STRATA_CUDA_LAUNCHED("layernorm_backward_kernel (bf16)");
  column_sums<Column::LayerNorm>(s, dy, x, stats, rows, dim, dgamma, dbeta);
}

void rmsnorm_forward(cudaStream_t s, const Bf16* x, const Bf16* gamma, Bf16* y, std::int64_t rows,
                     std::int64_t dim, float eps) {
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, y, dim, eps);
  STRATA_CUDA_LAUNCHED("rmsnorm_forward_kernel (bf16)");
}

void rmsnorm_backward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* dy, Bf16* dx, float* dgamma,
                      std::int64_t rows, std::int64_t dim, float eps, float* stats) {
  if (rows == 0) return;
  rmsnorm_backward_kernel<<<static_cast<unsigned>(rows), row_threads(dim), 0, s>>>(x, gamma, dy, dx, dim, eps, stats);
  STRATA_CUDA_LAUNCHED("rmsnorm_backward_kernel (bf16)");
  column_sums<Column::Rms>(s, dy, x, stats, rows, dim, dgamma, nullptr);
}

void broadcast_rows(cudaStream_t s, const Bf16* b, Bf16* y, std::int64_t rows, std::int64_t cols,
                    bool accumulate) {
  if (rows * cols == 0) return;
  broadcast_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(b, y, rows, cols, accumulate);
  STRATA_CUDA_LAUNCHED("broadcast_rows_kernel (bf16)");
}

void add_column_sums(cudaStream_t s, const Bf16* x, std::int64_t rows, std::int64_t cols, float* out) {
  column_sums<Column::Plain>(s, x, nullptr, nullptr, rows, cols, out, nullptr);
}

void causal_softmax_forward(cudaStream_t s, Bf16* p, std::int64_t matrices, std::int64_t seq) {
  if (matrices * seq == 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(matrices * seq), row_threads(seq), 0, s>>>(p, seq);
  STRATA_CUDA_LAUNCHED("causal_softmax_forward_kernel (bf16)");
}

void causal_softmax_backward(cudaStream_t s, const Bf16* p, Bf16* g, std::int64_t matrices, std::int64_t seq) {
  if (matrices * seq == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(matrices * seq), row_threads(seq), 0, s>>>(p, g, seq);
  STRATA_CUDA_LAUNCHED("causal_softmax_backward_kernel (bf16)");
}

void gelu_forward(cudaStream_t s, const Bf16* x, Bf16* y, std::int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  STRATA_CUDA_LAUNCHED("gelu_forward_kernel (bf16)");
}

void gelu_backward(cudaStream_t s, const Bf16* x, const Bf16* dy, Bf16* dx, std::int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, dy, dx, n);
  STRATA_CUDA_LAUNCHED("gelu_backward_kernel (bf16)");
}

void swiglu_forward(cudaStream_t s, const Bf16* gu, Bf16* y, std::int64_t rows, std::int64_t f) {
  if (rows * f == 0) return;
  swiglu_forward_kernel<<<blocks_for(rows * f), kThreads, 0, s>>>(gu, y, rows, f);
  STRATA_CUDA_LAUNCHED("swiglu_forward_kernel (bf16)");
}

void swiglu_backward(cudaStream_t s, const Bf16* gu, const Bf16* dy, Bf16* dgu, std::int64_t rows, std::int64_t f) {
  if (rows * f == 0) return;
  swiglu_backward_kernel<<<blocks_for(rows * f), kThreads, 0, s>>>(gu, dy, dgu, rows, f);
  STRATA_CUDA_LAUNCHED("swiglu_backward_kernel (bf16)");
}

void add(cudaStream_t s, const Bf16* x, Bf16* y, std::int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  STRATA_CUDA_LAUNCHED("add_kernel (bf16)");
}

}  // namespace strata::backend::cuda::kernels
