#pragma once
// The matrix-product ops of a GPT block on the GPU: linear layers and
// standard causal attention, as backend/cpu/kernels.hpp defines them (same
// arguments, weight layouts and saved tensors), over cuBLAS and the kernels
// of kernels.hpp. Internal to backend/cuda.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cpu/kernels.hpp"
#include "backend/cuda/blas.hpp"

namespace strata::backend::cuda {

using cpu::AttentionDims;
using cpu::WeightLayout;

// Where ops run: a stream and the cuBLAS handle that enqueues on it.
struct Ctx {
  cudaStream_t stream = nullptr;
  Blas* blas = nullptr;
};

// y[n×out] = x·W + b (y += with `accumulate`); b may be null.
void linear_forward(const Ctx& c, const float* x, const float* w, const float* b, float* y,
                    std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout,
                    bool accumulate);
// dx = dy·Wᵀ (+= with accumulate_dx; dx may be null); dw += xᵀ·dy; db += column sums of dy.
void linear_backward(const Ctx& c, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* db, std::int64_t n, std::int64_t in, std::int64_t out,
                     WeightLayout layout, bool accumulate_dx);

// P = softmax(QKᵀ/sqrt(head_dim), causal) into probs [batch × heads × seq ×
// seq]; out = P·V (out may be null: P only, for selective recompute).
// Batched over the heads of each sequence (strided cuBLAS products).
void attention_forward(const Ctx& c, const float* qkv, float* probs, float* out,
                       const AttentionDims& d);
// dqkv written. scratch holds `scratch_heads` seq × seq matrices (1 ≤
// scratch_heads ≤ heads): heads are processed in groups of that many.
void attention_backward(const Ctx& c, const float* qkv, const float* probs, const float* dout,
                        float* dqkv, float* scratch, std::int64_t scratch_heads,
                        const AttentionDims& d);

}  // namespace strata::backend::cuda
