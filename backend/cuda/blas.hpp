#pragma once
// Row-major matrix products over cuBLAS (column-major underneath: a
// row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so the
// operands swap). The same arguments as backend/cpu/blas.hpp's gemm, so the
// ops read alike on both backends. Internal to backend/cuda.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/memory.hpp"

namespace strata::backend::cuda {

// Input (and output) element types of a product; accumulation is fp32.
// FP32: plain fp32 (no TF32, PyTorch's default for matmuls); TF32: fp32
// storage on the tensor cores; BF16, FP16: 16-bit storage, fp32 accumulate.
enum class GemmType { FP32, TF32, BF16, FP16 };

// Strides between the matrices of a batched product, in elements.
struct BatchStrides {
  std::int64_t a = 0, b = 0, c = 0;
  std::int64_t count = 1;
};

// One timed product (Blas::profile): its shape and seconds on the device.
struct GemmRecord {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double seconds = 0;
};

class Blas {
 public:
  // A handle on the current device with a workspace of `workspace` bytes
  // from `alloc` (MemTag::Workspace: the simulator's cuBLAS workspace).
  explicit Blas(DeviceAllocator& alloc, Bytes workspace = Bytes{32} << 20);
  ~Blas();  // the workspace goes back to the allocator
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // C[m×n] = alpha·op(A)·op(B) + beta·C, row-major with leading dimensions,
  // fp32, on `stream`.
  void gemm(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
            std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b,
            std::int64_t ldb, float beta, float* c, std::int64_t ldc);
  // The same over `strides.count` matrices at fixed strides (attention heads).
  void gemm_batched(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                    std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b,
                    std::int64_t ldb, float beta, float* c, std::int64_t ldc, BatchStrides strides);
  // Any GemmType (pointers to elements of that type), for calibration and tests.
  void gemm_typed(cudaStream_t stream, GemmType type, bool trans_a, bool trans_b, std::int64_t m,
                  std::int64_t n, std::int64_t k, float alpha, const void* a, std::int64_t lda,
                  const void* b, std::int64_t ldb, float beta, void* c, std::int64_t ldc,
                  BatchStrides strides = {});
  // bf16 inputs (a, b), fp32 accumulation, the output bf16 or, with c_fp32,
  // fp32 (cuBLAS's CUDA_R_16BF × CUDA_R_16BF → CUDA_R_32F with
  // CUBLAS_COMPUTE_32F): the products of the bf16 mixed-precision step, its
  // logits and weight gradients fp32.
  void gemm_bf16(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                 std::int64_t k, float alpha, const void* a, std::int64_t lda, const void* b,
                 std::int64_t ldb, float beta, void* c, std::int64_t ldc, bool c_fp32,
                 BatchStrides strides = {});

  // While on, every product is bracketed by a pair of CUDA events (a little
  // overhead per product), so a training step's GEMMs are timed where they
  // run. profiled() waits for them and returns the records since the last
  // call (or since profiling was turned on).
  void profile(bool on);
  std::vector<GemmRecord> profiled();

 private:
  // cublasSetStream resets the handle to cuBLAS's own workspace pool, so
  // the stream is set (and our workspace again) only when it changes.
  void use_stream(cudaStream_t stream);
  // The product with input type `ab`, output type `cd` and `compute`.
  void gemm_ex(cudaStream_t stream, cudaDataType_t ab, cudaDataType_t cd, cublasComputeType_t compute,
               bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
               const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
               std::int64_t ldc, BatchStrides strides);

  DeviceAllocator* alloc_;
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool stream_set_ = false;
  struct Timed {
    GemmRecord r;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  bool profiling_ = false;
  std::vector<Timed> timed_;  // events are created once and reused
  std::size_t used_ = 0;
  void* workspace_ = nullptr;
  Bytes workspace_bytes_ = 0;
};

}  // namespace strata::backend::cuda
