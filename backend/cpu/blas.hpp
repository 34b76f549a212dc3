#pragma once
// The one door to the BLAS (OpenBLAS through CBLAS): row-major single
// precision matrix products with explicit leading dimensions, so kernels can
// multiply strided sub-matrices (one head of a fused QKV tensor) in place.
#include <cstdint>

namespace strata::backend::cpu {

// C[m×n] = alpha · op(A)[m×k] · op(B)[k×n] + beta · C, row-major; op(X) is
// Xᵀ when trans_x. lda, ldb, ldc: row strides of A, B and C as stored.
// Throws Error when a dimension does not fit the BLAS's 32-bit integers.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc);

// Threads OpenBLAS uses for each call. Process-wide: only tests, benchmarks
// and the application set it, never library code (ranks will be threads).
void set_blas_threads(int threads);
int blas_threads();

}  // namespace strata::backend::cpu
