#include "backend/cuda/check.hpp"

#include <string>

#include "sim/error.hpp"

namespace strata::backend::cuda {

namespace {
[[noreturn]] void fail(const char* call, const char* file, int line, const std::string& what) {
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + what);
}
}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  // A failed call leaves its error as the thread's last error; clear it so
  // the next check reports its own call, not this one (sticky errors, such
  // as a kernel's illegal address, stay and are reported again).
  cudaGetLastError();
  fail(call, file, line, std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")");
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(call, file, line,
       std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")");
}

void check_nccl(ncclResult_t status, const char* call, const char* file, int line) {
  if (status == ncclSuccess) return;
  // ncclInProgress is only returned by non-blocking communicators, which
  // this backend does not create.
  fail(call, file, line, "ncclResult " + std::to_string(static_cast<int>(status)) + " (" +
                             ncclGetErrorString(status) + ")");
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  fail((std::string("launch of ") + kernel).c_str(), file, line,
       std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")");
}

}  // namespace strata::backend::cuda
