#include "backend/cuda/blas.hpp"

#include <string>

#include "backend/cuda/check.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

namespace {

int dim(std::int64_t v, const char* what) {
  if (v < 0 || v > 0x7fffffff) throw Error(std::string("gemm: ") + what + " " + std::to_string(v) + " is out of cuBLAS's int range");
  return static_cast<int>(v);
}

}  // namespace

Blas::Blas(DeviceAllocator& alloc, Bytes workspace) : alloc_(&alloc), workspace_bytes_(workspace) {
  STRATA_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    // Scalars come from the host; plain fp32 products stay fp32 (no TF32).
    STRATA_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    STRATA_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    if (workspace_bytes_ > 0) workspace_ = alloc.allocate(workspace_bytes_, MemTag::Workspace);
    // Ready before any product on another stream uses it.
    STRATA_CUDA_CHECK(cudaStreamSynchronize(alloc.stream()));
    use_stream(alloc.stream());
  } catch (...) {
    if (workspace_ != nullptr) alloc.deallocate(workspace_, workspace_bytes_, MemTag::Workspace);
    cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() {
  for (auto& t : timed_) {
    cudaEventDestroy(t.start);
    cudaEventDestroy(t.end);
  }
  cublasDestroy(handle_);
  if (workspace_ != nullptr) alloc_->deallocate(workspace_, workspace_bytes_, MemTag::Workspace);
}

void Blas::use_stream(cudaStream_t stream) {
  if (stream_set_ && stream == stream_) return;
  STRATA_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  if (workspace_ != nullptr)
    STRATA_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, static_cast<std::size_t>(workspace_bytes_)));
  stream_ = stream;
  stream_set_ = true;
}

void Blas::gemm(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b,
                std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  gemm_typed(stream, GemmType::FP32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void Blas::gemm_batched(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m,
                        std::int64_t n, std::int64_t k, float alpha, const float* a,
                        std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                        std::int64_t ldc, BatchStrides strides) {
  gemm_typed(stream, GemmType::FP32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
             strides);
}

void Blas::gemm_typed(cudaStream_t stream, GemmType type, bool trans_a, bool trans_b,
                      std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const void* a,
                      std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
                      std::int64_t ldc, BatchStrides strides) {
  if (m == 0 || n == 0) return;
  if (strides.count < 1) throw Error("gemm: batch count must be >= 1");
  cudaDataType_t data = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (type) {
    case GemmType::FP32: break;
    case GemmType::TF32: compute = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case GemmType::BF16: data = CUDA_R_16BF; break;
    case GemmType::FP16: data = CUDA_R_16F; break;
  }
  gemm_ex(stream, data, data, compute, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, strides);
}

void Blas::gemm_bf16(cudaStream_t stream, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                     std::int64_t k, float alpha, const void* a, std::int64_t lda, const void* b,
                     std::int64_t ldb, float beta, void* c, std::int64_t ldc, bool c_fp32,
                     BatchStrides strides) {
  if (m == 0 || n == 0) return;
  if (strides.count < 1) throw Error("gemm: batch count must be >= 1");
  gemm_ex(stream, CUDA_R_16BF, c_fp32 ? CUDA_R_32F : CUDA_R_16BF, CUBLAS_COMPUTE_32F, trans_a, trans_b, m, n, k,
          alpha, a, lda, b, ldb, beta, c, ldc, strides);
}

void Blas::gemm_ex(cudaStream_t stream, cudaDataType_t data, cudaDataType_t out, cublasComputeType_t compute,
                   bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                   const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
                   std::int64_t ldc, BatchStrides strides) {
  use_stream(stream);
  Timed* timed = nullptr;
  if (profiling_) {
    if (used_ == timed_.size()) {
      Timed t;
      STRATA_CUDA_CHECK(cudaEventCreate(&t.start));
      STRATA_CUDA_CHECK(cudaEventCreate(&t.end));
      timed_.push_back(t);
    }
    timed = &timed_[used_++];
    timed->r = {m, n, k, strides.count, 0};
    STRATA_CUDA_CHECK(cudaEventRecord(timed->start, stream));
  }
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B first.
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (strides.count == 1) {
    STRATA_CUBLAS_CHECK(cublasGemmEx(handle_, op_b, op_a, dim(n, "n"), dim(m, "m"), dim(k, "k"), &alpha,
                                     b, data, dim(ldb, "ldb"), a, data, dim(lda, "lda"), &beta, c,
                                     out, dim(ldc, "ldc"), compute, CUBLAS_GEMM_DEFAULT));
  } else {
    STRATA_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle_, op_b, op_a, dim(n, "n"), dim(m, "m"), dim(k, "k"), &alpha, b, data, dim(ldb, "ldb"),
        strides.b, a, data, dim(lda, "lda"), strides.a, &beta, c, out, dim(ldc, "ldc"), strides.c,
        dim(strides.count, "batch"), compute, CUBLAS_GEMM_DEFAULT));
  }
  if (timed != nullptr) STRATA_CUDA_CHECK(cudaEventRecord(timed->end, stream));
}

void Blas::profile(bool on) {
  profiling_ = on;
  used_ = 0;
}

std::vector<GemmRecord> Blas::profiled() {
  std::vector<GemmRecord> out;
  for (std::size_t i = 0; i < used_; ++i) {
    Timed& t = timed_[i];
    STRATA_CUDA_CHECK(cudaEventSynchronize(t.end));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.end));
    t.r.seconds = static_cast<double>(ms) * 1e-3;
    out.push_back(t.r);
  }
  used_ = 0;
  return out;
}

}  // namespace strata::backend::cuda
