#include "backend/cpu/blas.hpp"

#include <cblas.h>

#include <climits>
#include <string>

#include "sim/error.hpp"

// OpenBLAS's own entry points, declared here too in case the cblas.h found is
// another vendor's (the library linked is OpenBLAS either way).
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace strata::backend::cpu {

namespace {
int checked(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw Error(std::string("gemm: ") + what + " = " + std::to_string(v) +
                " is outside the BLAS's 32-bit range");
  return static_cast<int>(v);
}
}  // namespace

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, checked(m, "m"), checked(n, "n"),
              checked(k, "k"), alpha, a, checked(lda, "lda"), b, checked(ldb, "ldb"), beta, c,
              checked(ldc, "ldc"));
}

void set_blas_threads(int threads) {
  if (threads < 1) throw Error("set_blas_threads: threads must be >= 1");
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace strata::backend::cpu
