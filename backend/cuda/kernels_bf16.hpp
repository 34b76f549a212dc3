#pragma once
// The bf16 kernels of a mixed-precision training step (kernels_bf16.cu):
// overloads of kernels.hpp's functions, picked by pointer type, with the same
// arguments, layouts and accumulate conventions. Activations and working
// weights are bf16; every kernel computes in fp32 (row statistics, softmax
// sums, exponentials) and rounds once when it stores a bf16 value. Parameter
// gradients are fp32 (the master weights' precision: Megatron-LM accumulates
// bf16 models' gradients in fp32), so the gradient outputs stay `float*`.
// The per-element math is bf16_math.hpp's, checked on the host.
// Internal to backend/cuda; plain C++17 and no other Strata header.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/bf16_math.hpp"

namespace strata::backend::cuda::kernels {

// --- casts ---------------------------------------------------------------------------
// y[i] = bf16(x[i]) (round to nearest even); the master weights → the
// working copy after each optimizer step, an fp32 gradient → bf16.
void cast(cudaStream_t s, const float* x, Bf16* y, std::int64_t n);
// y[i] = float(x[i]) (exact).
void cast(cudaStream_t s, const Bf16* x, float* y, std::int64_t n);

// --- embedding ---------------------------------------------------------------------
// y[t] = bf16(table[tokens[t]] + pos[t mod seq]), the sum in fp32.
void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const Bf16* table,
                       const Bf16* pos, Bf16* y, std::int64_t batch, std::int64_t seq,
                       std::int64_t hidden);
// dtable[tokens[t]] += dy[t] (fp32 atomic adds); dpos[p] += Σ_b dy[b·seq + p].
void embedding_backward(cudaStream_t s, const std::int32_t* tokens, const Bf16* dy,
                        float* dtable, float* dpos, std::int64_t batch, std::int64_t seq,
                        std::int64_t hidden);

// --- norms (fp32 statistics) ---------------------------------------------------------
void layernorm_forward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* beta,
                       Bf16* y, std::int64_t rows, std::int64_t dim, float eps);
// dx ACCUMULATES (bf16 += fp32 result, one rounding); dgamma, dbeta fp32 accumulate.
void layernorm_backward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* dy,
                        Bf16* dx, float* dgamma, float* dbeta, std::int64_t rows,
                        std::int64_t dim, float eps, float* stats);
void rmsnorm_forward(cudaStream_t s, const Bf16* x, const Bf16* gamma, Bf16* y,
                     std::int64_t rows, std::int64_t dim, float eps);
void rmsnorm_backward(cudaStream_t s, const Bf16* x, const Bf16* gamma, const Bf16* dy,
                      Bf16* dx, float* dgamma, std::int64_t rows, std::int64_t dim, float eps,
                      float* stats);

// --- pieces of a linear layer -----------------------------------------------------------
void broadcast_rows(cudaStream_t s, const Bf16* b, Bf16* y, std::int64_t rows,
                    std::int64_t cols, bool accumulate);
// out[c] += Σ_r x[r·cols + c] in fp32 (a bias gradient).
void add_column_sums(cudaStream_t s, const Bf16* x, std::int64_t rows, std::int64_t cols,
                     float* out);

// --- causal softmax, fp32 maximum and sum --------------------------------------------------
void causal_softmax_forward(cudaStream_t s, Bf16* p, std::int64_t matrices, std::int64_t seq);
void causal_softmax_backward(cudaStream_t s, const Bf16* p, Bf16* g, std::int64_t matrices,
                             std::int64_t seq);

// --- activations -------------------------------------------------------------------------
void gelu_forward(cudaStream_t s, const Bf16* x, Bf16* y, std::int64_t n);
void gelu_backward(cudaStream_t s, const Bf16* x, const Bf16* dy, Bf16* dx, std::int64_t n);
void swiglu_forward(cudaStream_t s, const Bf16* gu, Bf16* y, std::int64_t rows, std::int64_t f);
void swiglu_backward(cudaStream_t s, const Bf16* gu, const Bf16* dy, Bf16* dgu,
                     std::int64_t rows, std::int64_t f);

// --- element-wise ---------------------------------------------------------------------------
// y += x (in fp32, rounded once).
void add(cudaStream_t s, const Bf16* x, Bf16* y, std::int64_t n);

}  // namespace strata::backend::cuda::kernels
