#pragma once
// The element-wise and row-wise kernels of a GPT training step on the GPU
// (kernels.cu), each the counterpart of a backend/cpu/kernels.hpp function
// with the same arguments and conventions (row-major [tokens × features];
// backward writes the input gradient unless it says it accumulates;
// parameter gradients accumulate), enqueued on `stream`. The matrix
// products are in ops.hpp (cuBLAS). Internal to backend/cuda; plain C++17
// (nvcc compiles kernels.cu as C++17) and no other Strata header.
//
// Every launch is checked (STRATA_CUDA_LAUNCHED): a bad configuration throws
// strata::Error naming the kernel, file and line. Errors inside a kernel
// surface at the next synchronising call.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::backend::cuda::kernels {

// --- fill and initialise -------------------------------------------------------
void fill(cudaStream_t s, float* x, std::int64_t n, float value);
// x[i] = sd·N(0, 1) from a counter-based hash of (seed, i): the same values
// on every GPU and launch configuration.
void init_normal(cudaStream_t s, float* x, std::int64_t n, float sd, std::uint64_t seed);
// 16-bit values uniform in [−1, 1) (bf16 or fp16 bits), for GEMM benchmarks.
void init_uniform_16bit(cudaStream_t s, void* x, std::int64_t n, bool bf16, std::uint64_t seed);

// --- embedding -------------------------------------------------------------------
// y[t] = table[tokens[t]] + pos[t mod seq] (pos may be null). Tokens are
// checked on the host before they reach the device.
void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const float* table,
                       const float* pos, float* y, std::int64_t batch, std::int64_t seq,
                       std::int64_t hidden);
// dtable[tokens[t]] += dy[t] (atomic adds: the order of the sums varies);
// dpos[p] += Σ_b dy[b·seq + p] (fixed order). Either may be null.
void embedding_backward(cudaStream_t s, const std::int32_t* tokens, const float* dy,
                        float* dtable, float* dpos, std::int64_t batch, std::int64_t seq,
                        std::int64_t hidden);

// --- norms -----------------------------------------------------------------------
void layernorm_forward(cudaStream_t s, const float* x, const float* gamma, const float* beta,
                       float* y, std::int64_t rows, std::int64_t dim, float eps);
// dx ACCUMULATES; dgamma, dbeta accumulate. stats: 2·rows floats of scratch.
void layernorm_backward(cudaStream_t s, const float* x, const float* gamma, const float* dy,
                        float* dx, float* dgamma, float* dbeta, std::int64_t rows,
                        std::int64_t dim, float eps, float* stats);
void rmsnorm_forward(cudaStream_t s, const float* x, const float* gamma, float* y,
                     std::int64_t rows, std::int64_t dim, float eps);
// dx ACCUMULATES; dgamma accumulates. stats: rows floats of scratch.
void rmsnorm_backward(cudaStream_t s, const float* x, const float* gamma, const float* dy,
                      float* dx, float* dgamma, std::int64_t rows, std::int64_t dim, float eps,
                      float* stats);

// --- pieces of a linear layer (the products are cuBLAS) ------------------------------
// y[r] = b, or y[r] += b with `accumulate`, for every row r.
void broadcast_rows(cudaStream_t s, const float* b, float* y, std::int64_t rows,
                    std::int64_t cols, bool accumulate);
// out[c] += Σ_r x[r·cols + c] (a bias gradient).
void add_column_sums(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                     float* out);

// --- causal softmax over `matrices` seq × seq score matrices, row by row -----------
// Row i keeps columns 0..i: p = softmax of them, the rest 0. In place.
void causal_softmax_forward(cudaStream_t s, float* p, std::int64_t matrices, std::int64_t seq);
// g := p ⊙ (g − rowsum(p ⊙ g)) on columns 0..i, 0 beyond (dS from dP).
void causal_softmax_backward(cudaStream_t s, const float* p, float* g, std::int64_t matrices,
                             std::int64_t seq);

// --- activations -------------------------------------------------------------------
// GeLU, tanh approximation. dx may alias dy.
void gelu_forward(cudaStream_t s, const float* x, float* y, std::int64_t n);
void gelu_backward(cudaStream_t s, const float* x, const float* dy, float* dx, std::int64_t n);
// SwiGLU: gu rows gate | up [rows × 2f]; y = silu(gate)·up [rows × f].
void swiglu_forward(cudaStream_t s, const float* gu, float* y, std::int64_t rows, std::int64_t f);
void swiglu_backward(cudaStream_t s, const float* gu, const float* dy, float* dgu,
                     std::int64_t rows, std::int64_t f);

// --- element-wise -------------------------------------------------------------------
// y += x
void add(cudaStream_t s, const float* x, float* y, std::int64_t n);

// --- loss ---------------------------------------------------------------------------
// Softmax cross-entropy: logits [n × vocab] become their softmax in place;
// row_loss[r] = log Σ exp − logit[target] (double).
void cross_entropy_forward(cudaStream_t s, float* logits, const std::int32_t* targets,
                           std::int64_t n, std::int64_t vocab, double* row_loss);
// probs := (probs − onehot(target))·scale.
void cross_entropy_backward(cudaStream_t s, float* probs, const std::int32_t* targets,
                            std::int64_t n, std::int64_t vocab, float scale);
// acc[0] += scale·Σ x (one block, a fixed order: the same sum every run).
void sum_into(cudaStream_t s, const double* x, std::int64_t n, double scale, double* acc);

// --- checks -------------------------------------------------------------------------
// *flag = 1 (and *any = 1 when any is not null) when one of x[0..n) is NaN
// or ±Inf; both are left alone otherwise.
void flag_non_finite(cudaStream_t s, const float* x, std::int64_t n, int* flag, int* any);

// --- optimizers (the updates of backend/cpu/optimizer.cpp) ---------------------------
// Every update does nothing when *skip != 0 (a non-finite gradient was
// found this step); skip may be null.
struct AdamStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = false;
  float step_size = 0;     // lr / (1 − β₁ᵗ)
  float inv_sqrt_bc2 = 0;  // 1 / sqrt(1 − β₂ᵗ)
};
void adam_step(cudaStream_t s, float* p, const float* g, float* m, float* v, std::int64_t n,
               const AdamStep& a, const int* skip);
// Plain SGD (velocity null) or momentum (velocity = grad on the first step).
void sgd_step(cudaStream_t s, float* p, const float* g, float* velocity, std::int64_t n,
              float lr, float momentum, float weight_decay, bool first, const int* skip);

// --- calibration --------------------------------------------------------------------
// A kernel that does nothing (launch overhead), and one that keeps the
// stream busy for `ns` nanoseconds (so the host can queue work behind it).
void empty(cudaStream_t s);
void spin(cudaStream_t s, std::int64_t ns);
// a = b + scalar·c (STREAM triad: 12 bytes moved per element).
void triad(cudaStream_t s, float* a, const float* b, const float* c, float scalar, std::int64_t n);

}  // namespace strata::backend::cuda::kernels
