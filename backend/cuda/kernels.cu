// Kernels of the GPT training step (kernels.hpp says what each computes).
// Written for clarity first: one block per row for row-wise ops, grid-stride
// loops for element-wise ones, fp32 arithmetic throughout.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"

namespace strata::backend::cuda::kernels {

namespace {

using launch::block_max;
using launch::block_sum;
using launch::blocks_for;
using launch::global_index;
using launch::grid_stride;
using launch::kThreads;
using launch::row_threads;

__device__ inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------- fill

__global__ void fill_kernel(float* x, std::int64_t n, float v) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) x[i] = v;
}

__global__ void init_normal_kernel(float* x, std::int64_t n, float sd, std::uint64_t seed) {
  const std::uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL);
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const std::uint64_t z = mix64(key + static_cast<std::uint64_t>(i) * 0xd1b54a32d192ed03ULL);
    // Two 24-bit uniforms: u1 in (0, 1], u2 in [0, 1); Box–Muller.
    const float u1 = (static_cast<float>(z >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((z >> 16) & 0xffffffULL) * (1.0f / 16777216.0f);
    x[i] = sd * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

__global__ void init_uniform_16bit_kernel(void* x, std::int64_t n, bool bf16, std::uint64_t seed) {
  const std::uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL);
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const std::uint64_t z = mix64(key + static_cast<std::uint64_t>(i) * 0xd1b54a32d192ed03ULL);
    const float u = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (bf16)
      static_cast<__nv_bfloat16*>(x)[i] = __float2bfloat16(u);
    else
      static_cast<__half*>(x)[i] = __float2half(u);
  }
}

// ---------------------------------------------------------------- embedding

__global__ void embedding_forward_kernel(const std::int32_t* tokens, const float* table,
                                         const float* pos, float* y, std::int64_t n,
                                         std::int64_t seq, std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < n * hidden; e += grid_stride()) {
    const std::int64_t t = e / hidden, i = e % hidden;
    float v = table[static_cast<std::int64_t>(tokens[t]) * hidden + i];
    if (pos != nullptr) v += pos[(t % seq) * hidden + i];
    y[e] = v;
  }
}

__global__ void embedding_table_grad_kernel(const std::int32_t* tokens, const float* dy,
                                            float* dtable, std::int64_t n, std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < n * hidden; e += grid_stride()) {
    const std::int64_t t = e / hidden, i = e % hidden;
    atomicAdd(dtable + static_cast<std::int64_t>(tokens[t]) * hidden + i, dy[e]);
  }
}

__global__ void embedding_pos_grad_kernel(const float* dy, float* dpos, std::int64_t batch,
                                          std::int64_t seq, std::int64_t hidden) {
  for (std::int64_t e = global_index(); e < seq * hidden; e += grid_stride()) {
    float acc = 0.0f;
    for (std::int64_t b = 0; b < batch; ++b) acc += dy[b * seq * hidden + e];
    dpos[e] += acc;
  }
}

// ---------------------------------------------------------------- norms

// One row's mean and 1/sqrt(var + eps), the block's threads together
// (every thread gets both).
__device__ void row_moments(const float* xr, std::int64_t dim, float eps, float* sh, float& mean,
                            float& rstd) {
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
  mean = block_sum(s, sh) / static_cast<float>(dim);
  float v = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = xr[i] - mean;
    v += d * d;
  }
  rstd = 1.0f / sqrtf(block_sum(v, sh) / static_cast<float>(dim) + eps);
}

// One row's 1/sqrt(mean(x²) + eps), the block's threads together.
__device__ float rms_scale(const float* xr, std::int64_t dim, float eps, float* sh) {
  float s = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i] * xr[i];
  return 1.0f / sqrtf(block_sum(s, sh) / static_cast<float>(dim) + eps);
}

__global__ void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                         float* y, std::int64_t dim, float eps) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float* yr = y + r * dim;
  float mean, rstd;
  row_moments(xr, dim, eps, sh, mean, rstd);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
}

// dx += rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = dy·gamma; stats[2r] = mean, [2r+1] = rstd.
__global__ void layernorm_backward_kernel(const float* x, const float* gamma, const float* dy,
                                          float* dx, std::int64_t dim, float eps, float* stats) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* g = dy + r * dim;
  float* dxr = dx + r * dim;
  float mean, rstd;
  row_moments(xr, dim, eps, sh, mean, rstd);
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float gh = g[i] * gamma[i];
    sg += gh;
    sgx += gh * (xr[i] - mean) * rstd;
  }
  const float mg = block_sum(sg, sh) / static_cast<float>(dim);
  const float mgx = block_sum(sgx, sh) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float xhat = (xr[i] - mean) * rstd;
    dxr[i] += rstd * (g[i] * gamma[i] - mg - xhat * mgx);
  }
  if (threadIdx.x == 0) {
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

__global__ void rmsnorm_forward_kernel(const float* x, const float* gamma, float* y,
                                       std::int64_t dim, float eps) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float* yr = y + r * dim;
  const float rr = rms_scale(xr, dim, eps, sh);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = xr[i] * rr * gamma[i];
}

// dx += rr·(ĝ − x̂·mean(ĝ·x̂)), x̂ = x·rr; stats[r] = rr.
__global__ void rmsnorm_backward_kernel(const float* x, const float* gamma, const float* dy,
                                        float* dx, std::int64_t dim, float eps, float* stats) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* g = dy + r * dim;
  float* dxr = dx + r * dim;
  const float rr = rms_scale(xr, dim, eps, sh);
  float sgx = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) sgx += g[i] * gamma[i] * xr[i] * rr;
  const float mgx = block_sum(sgx, sh) / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dxr[i] += rr * (g[i] * gamma[i] - xr[i] * rr * mgx);
  if (threadIdx.x == 0) stats[r] = rr;
}

// Column sums over row chunks: block (32, 8) covers 32 columns of
// kColumnChunk rows; partial sums are added atomically.
constexpr int kColumnChunk = 128;
enum class Column { Plain, LayerNorm, Rms };

template <Column kMode>
__global__ void column_sums_kernel(const float* a, const float* x, const float* stats,
                                   std::int64_t rows, std::int64_t cols, float* out,
                                   float* out2) {
  __shared__ float s1[8][33], s2[8][33];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * kColumnChunk;
  const std::int64_t r1 = r0 + kColumnChunk < rows ? r0 + kColumnChunk : rows;
  float acc = 0.0f, acc2 = 0.0f;
  if (c < cols) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float v = a[r * cols + c];
      if constexpr (kMode == Column::Plain) {
        acc += v;
      } else if constexpr (kMode == Column::LayerNorm) {
        acc += v * (x[r * cols + c] - stats[2 * r]) * stats[2 * r + 1];
        acc2 += v;
      } else {
        acc += v * x[r * cols + c] * stats[r];
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
void column_sums(cudaStream_t s, const float* a, const float* x, const float* stats,
                 std::int64_t rows, std::int64_t cols, float* out, float* out2) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                  static_cast<unsigned>((rows + kColumnChunk - 1) / kColumnChunk));
  column_sums_kernel<kMode><<<grid, dim3(32, 8), 0, s>>>(a, x, stats, rows, cols, out, out2);
  STRATA_CUDA_LAUNCHED("column_sums_kernel");
}

// ---------------------------------------------------------------- linear pieces

__global__ void broadcast_rows_kernel(const float* b, float* y, std::int64_t rows,
                                      std::int64_t cols, bool accumulate) {
  for (std::int64_t e = global_index(); e < rows * cols; e += grid_stride()) {
    const float v = b[e % cols];
    y[e] = accumulate ? y[e] + v : v;
  }
}

// ---------------------------------------------------------------- softmax

__global__ void causal_softmax_forward_kernel(float* p, std::int64_t seq) {
  __shared__ float sh[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t valid = row % seq + 1;
  float* pr = p + row * seq;
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, pr[j]);
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    const float e = expf(pr[j] - mx);
    pr[j] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum, sh);
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x) pr[j] = j < valid ? pr[j] * inv : 0.0f;
}

__global__ void causal_softmax_backward_kernel(const float* p, float* g, std::int64_t seq) {
  __shared__ float sh[32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t valid = row % seq + 1;
  const float* pr = p + row * seq;
  float* gr = g + row * seq;
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j < valid; j += blockDim.x) dot += pr[j] * gr[j];
  dot = block_sum(dot, sh);
  for (std::int64_t j = threadIdx.x; j < seq; j += blockDim.x)
    gr[j] = j < valid ? pr[j] * (gr[j] - dot) : 0.0f;
}

// ---------------------------------------------------------------- activations

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;

__global__ void gelu_forward_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    const float dt = kGeluC * (1.0f + 3.0f * kGeluA * v * v) * (1.0f - t * t);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

__global__ void swiglu_forward_kernel(const float* gu, float* y, std::int64_t rows, std::int64_t f) {
  for (std::int64_t e = global_index(); e < rows * f; e += grid_stride()) {
    const std::int64_t r = e / f, i = e % f;
    const float g = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i];
    y[e] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(const float* gu, const float* dy, float* dgu,
                                       std::int64_t rows, std::int64_t f) {
  for (std::int64_t e = global_index(); e < rows * f; e += grid_stride()) {
    const std::int64_t r = e / f, i = e % f;
    const float g = gu[r * 2 * f + i], u = gu[r * 2 * f + f + i], d = dy[e];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgu[r * 2 * f + f + i] = d * g * sig;
    dgu[r * 2 * f + i] = d * u * sig * (1.0f + g * (1.0f - sig));
  }
}

__global__ void add_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) y[i] += x[i];
}

// ---------------------------------------------------------------- loss

__global__ void cross_entropy_forward_kernel(float* logits, const std::int32_t* targets,
                                             std::int64_t vocab, double* row_loss) {
  __shared__ float sh[32];
  const std::int64_t r = blockIdx.x;
  float* row = logits + r * vocab;
  const float target_logit = row[targets[r]];  // read before the row is overwritten
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, sh);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  sum = block_sum(sum, sh);
  const float inv = 1.0f / sum;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) row[j] *= inv;
  if (threadIdx.x == 0)
    row_loss[r] = log(static_cast<double>(sum)) + static_cast<double>(mx) - static_cast<double>(target_logit);
}

__global__ void cross_entropy_backward_kernel(float* probs, const std::int32_t* targets,
                                              std::int64_t n, std::int64_t vocab, float scale) {
  for (std::int64_t e = global_index(); e < n * vocab; e += grid_stride()) {
    const std::int64_t r = e / vocab, j = e % vocab;
    const float v = j == targets[r] ? probs[e] - 1.0f : probs[e];
    probs[e] = v * scale;
  }
}

__global__ void sum_into_kernel(const double* x, std::int64_t n, double scale, double* acc) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) acc[0] += scale * sh[0];
}

__global__ void flag_non_finite_kernel(const float* x, std::int64_t n, int* flag, int* any) {
  bool bad = false;
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) bad |= !isfinite(x[i]);
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) {
    *flag = 1;
    if (any != nullptr) *any = 1;
  }
}

// ---------------------------------------------------------------- optimizers

__global__ void adam_kernel(float* p, const float* g, float* m, float* v, std::int64_t n,
                            AdamStep a, const int* skip) {
  if (skip != nullptr && *skip != 0) return;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    float d = g[j];
    float pj = p[j];
    if (a.decoupled)
      pj -= a.lr * a.weight_decay * pj;
    else
      d += a.weight_decay * pj;
    const float mj = a.beta1 * m[j] + (1.0f - a.beta1) * d;
    const float vj = a.beta2 * v[j] + (1.0f - a.beta2) * d * d;
    m[j] = mj;
    v[j] = vj;
    p[j] = pj - a.step_size * mj / (sqrtf(vj) * a.inv_sqrt_bc2 + a.eps);
  }
}

__global__ void sgd_kernel(float* p, const float* g, float* vel, std::int64_t n, float lr,
                           float momentum, float wd, bool first, const int* skip) {
  if (skip != nullptr && *skip != 0) return;
  for (std::int64_t j = global_index(); j < n; j += grid_stride()) {
    const float d = g[j] + wd * p[j];
    if (vel == nullptr) {
      p[j] -= lr * d;
    } else {
      const float v = first ? d : momentum * vel[j] + d;
      vel[j] = v;
      p[j] -= lr * v;
    }
  }
}

__global__ void empty_kernel() {}

__device__ inline std::int64_t global_timer_ns() {
  std::int64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(std::int64_t ns) {
  const std::int64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

__global__ void triad_kernel(float* a, const float* b, const float* c, float scalar, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) a[i] = b[i] + scalar * c[i];
}

}  // namespace

// ---------------------------------------------------------------- launchers

#define STRATA_ELEMENTWISE(n, kernel, ...)                                  \
  do {                                                                      \
    if ((n) > 0) {                                                          \
      kernel<<<blocks_for(n), kThreads, 0, s>>>(__VA_ARGS__);               \
      STRATA_CUDA_LAUNCHED(#kernel);                                        \
    }                                                                       \
  } while (0)

#define STRATA_PER_ROW(rows, threads, kernel, ...)                          \
  do {                                                                      \
    if ((rows) > 0) {                                                       \
      kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(__VA_ARGS__);  \
      STRATA_CUDA_LAUNCHED(#kernel);                                        \
    }                                                                       \
  } while (0)

void fill(cudaStream_t s, float* x, std::int64_t n, float value) {
  STRATA_ELEMENTWISE(n, fill_kernel, x, n, value);
}

void init_normal(cudaStream_t s, float* x, std::int64_t n, float sd, std::uint64_t seed) {
  STRATA_ELEMENTWISE(n, init_normal_kernel, x, n, sd, seed);
}

void init_uniform_16bit(cudaStream_t s, void* x, std::int64_t n, bool bf16, std::uint64_t seed) {
  STRATA_ELEMENTWISE(n, init_uniform_16bit_kernel, x, n, bf16, seed);
}

void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const float* table,
                       const float* pos, float* y, std::int64_t batch, std::int64_t seq,
                       std::int64_t hidden) {
  const std::int64_t n = batch * seq;
  STRATA_ELEMENTWISE(n * hidden, embedding_forward_kernel, tokens, table, pos, y, n, seq, hidden);
}

void embedding_backward(cudaStream_t s, const std::int32_t* tokens, const float* dy,
                        float* dtable, float* dpos, std::int64_t batch, std::int64_t seq,
                        std::int64_t hidden) {
  const std::int64_t n = batch * seq;
  if (dtable != nullptr) STRATA_ELEMENTWISE(n * hidden, embedding_table_grad_kernel, tokens, dy, dtable, n, hidden);
  if (dpos != nullptr) STRATA_ELEMENTWISE(seq * hidden, embedding_pos_grad_kernel, dy, dpos, batch, seq, hidden);
}

void layernorm_forward(cudaStream_t s, const float* x, const float* gamma, const float* beta,
                       float* y, std::int64_t rows, std::int64_t dim, float eps) {
  STRATA_PER_ROW(rows, row_threads(dim), layernorm_forward_kernel, x, gamma, beta, y, dim, eps);
}

void layernorm_backward(cudaStream_t s, const float* x, const float* gamma, const float* dy,
                        float* dx, float* dgamma, float* dbeta, std::int64_t rows,
                        std::int64_t dim, float eps, float* stats) {
  STRATA_PER_ROW(rows, row_threads(dim), layernorm_backward_kernel, x, gamma, dy, dx, dim, eps, stats);
  column_sums<Column::LayerNorm>(s, dy, x, stats, rows, dim, dgamma, dbeta);
}

void rmsnorm_forward(cudaStream_t s, const float* x, const float* gamma, float* y,
                     std::int64_t rows, std::int64_t dim, float eps) {
  STRATA_PER_ROW(rows, row_threads(dim), rmsnorm_forward_kernel, x, gamma, y, dim, eps);
}

void rmsnorm_backward(cudaStream_t s, const float* x, const float* gamma, const float* dy,
                      float* dx, float* dgamma, std::int64_t rows, std::int64_t dim, float eps,
                      float* stats) {
  STRATA_PER_ROW(rows, row_threads(dim), rmsnorm_backward_kernel, x, gamma, dy, dx, dim, eps, stats);
  column_sums<Column::Rms>(s, dy, x, stats, rows, dim, dgamma, nullptr);
}

void broadcast_rows(cudaStream_t s, const float* b, float* y, std::int64_t rows,
                    std::int64_t cols, bool accumulate) {
  STRATA_ELEMENTWISE(rows * cols, broadcast_rows_kernel, b, y, rows, cols, accumulate);
}

void add_column_sums(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                     float* out) {
  column_sums<Column::Plain>(s, x, nullptr, nullptr, rows, cols, out, nullptr);
}

void causal_softmax_forward(cudaStream_t s, float* p, std::int64_t matrices, std::int64_t seq) {
  STRATA_PER_ROW(matrices * seq, row_threads(seq), causal_softmax_forward_kernel, p, seq);
}

void causal_softmax_backward(cudaStream_t s, const float* p, float* g, std::int64_t matrices,
                             std::int64_t seq) {
  STRATA_PER_ROW(matrices * seq, row_threads(seq), causal_softmax_backward_kernel, p, g, seq);
}

void gelu_forward(cudaStream_t s, const float* x, float* y, std::int64_t n) {
  STRATA_ELEMENTWISE(n, gelu_forward_kernel, x, y, n);
}

void gelu_backward(cudaStream_t s, const float* x, const float* dy, float* dx, std::int64_t n) {
  STRATA_ELEMENTWISE(n, gelu_backward_kernel, x, dy, dx, n);
}

void swiglu_forward(cudaStream_t s, const float* gu, float* y, std::int64_t rows, std::int64_t f) {
  STRATA_ELEMENTWISE(rows * f, swiglu_forward_kernel, gu, y, rows, f);
}

void swiglu_backward(cudaStream_t s, const float* gu, const float* dy, float* dgu,
                     std::int64_t rows, std::int64_t f) {
  STRATA_ELEMENTWISE(rows * f, swiglu_backward_kernel, gu, dy, dgu, rows, f);
}

void add(cudaStream_t s, const float* x, float* y, std::int64_t n) {
  STRATA_ELEMENTWISE(n, add_kernel, x, y, n);
}

void cross_entropy_forward(cudaStream_t s, float* logits, const std::int32_t* targets,
                           std::int64_t n, std::int64_t vocab, double* row_loss) {
  STRATA_PER_ROW(n, row_threads(vocab), cross_entropy_forward_kernel, logits, targets, vocab, row_loss);
}

void cross_entropy_backward(cudaStream_t s, float* probs, const std::int32_t* targets,
                            std::int64_t n, std::int64_t vocab, float scale) {
  STRATA_ELEMENTWISE(n * vocab, cross_entropy_backward_kernel, probs, targets, n, vocab, scale);
}

void sum_into(cudaStream_t s, const double* x, std::int64_t n, double scale, double* acc) {
  sum_into_kernel<<<1, kThreads, 0, s>>>(x, n, scale, acc);
  STRATA_CUDA_LAUNCHED("sum_into_kernel");
}

void flag_non_finite(cudaStream_t s, const float* x, std::int64_t n, int* flag, int* any) {
  STRATA_ELEMENTWISE(n, flag_non_finite_kernel, x, n, flag, any);
}

void adam_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
               const AdamStep& a, const int* skip) {
  STRATA_ELEMENTWISE(n, adam_kernel, p, g, m, v, n, a, skip);
}

void sgd_step(cudaStream_t s, float* p, const float* g, float* velocity, std::int64_t n,
              float lr, float momentum, float weight_decay, bool first, const int* skip) {
  STRATA_ELEMENTWISE(n, sgd_kernel, p, g, velocity, n, lr, momentum, weight_decay, first, skip);
}

void empty(cudaStream_t s) {
  empty_kernel<<<1, 1, 0, s>>>();
  STRATA_CUDA_LAUNCHED("empty_kernel");
}

void spin(cudaStream_t s, std::int64_t ns) {
  spin_kernel<<<1, 1, 0, s>>>(ns);
  STRATA_CUDA_LAUNCHED("spin_kernel");
}

void triad(cudaStream_t s, float* a, const float* b, const float* c, float scalar, std::int64_t n) {
  STRATA_ELEMENTWISE(n, triad_kernel, a, b, c, scalar, n);
}

}  // namespace strata::backend::cuda::kernels
