#pragma once
// The matrix-product ops of a GPT block on the GPU: linear layers and
// standard causal attention, as backend/cpu/kernels.hpp defines them (same
// arguments, weight layouts and saved tensors), over cuBLAS and the kernels
// of kernels.hpp. Internal to backend/cuda.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/common/op_shapes.hpp"
#include "backend/cuda/bf16_math.hpp"
#include "backend/cuda/blas.hpp"

namespace strata::backend::cuda {

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

// --- bf16 mixed precision: the same ops with bf16 activations and weights --------
// cuBLAS bf16 products with fp32 accumulation (Blas::gemm_bf16), the bf16
// kernels of kernels_bf16.hpp; weight and bias gradients are fp32 (dw, db
// accumulate in fp32), as the master weights they update.
void linear_forward(const Ctx& c, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y,
                    std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout,
                    bool accumulate);
// The same with an fp32 output (the logits, which the loss reads in fp32);
// no bias.
void linear_forward(const Ctx& c, const Bf16* x, const Bf16* w, std::nullptr_t b, float* y,
                    std::int64_t n, std::int64_t in, std::int64_t out, WeightLayout layout,
                    bool accumulate);
void linear_backward(const Ctx& c, const Bf16* x, const Bf16* w, const Bf16* dy, Bf16* dx,
                     float* dw, float* db, std::int64_t n, std::int64_t in, std::int64_t out,
                     WeightLayout layout, bool accumulate_dx);
// Scores and probabilities bf16, the softmax in fp32 arithmetic.
void attention_forward(const Ctx& c, const Bf16* qkv, Bf16* probs, Bf16* out,
                       const AttentionDims& d);
void attention_backward(const Ctx& c, const Bf16* qkv, const Bf16* probs, const Bf16* dout,
                        Bf16* dqkv, Bf16* scratch, std::int64_t scratch_heads,
                        const AttentionDims& d);

}  // namespace strata::backend::cuda
