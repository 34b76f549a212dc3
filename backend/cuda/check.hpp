#pragma once
// Checked CUDA, cuBLAS and NCCL calls. Internal to backend/cuda (it names
// CUDA types): code outside the backend includes only its plain headers
// (device.hpp, executor.hpp, calibrate.hpp).
//
//   STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
//   STRATA_CUBLAS_CHECK(cublasSgemm(...));
//   STRATA_NCCL_CHECK(ncclAllReduce(...));
//
// A failure throws strata::Error (never exits) naming the call's text, the
// file and line, and the library's name and description of the status:
// "cudaMalloc(&p, n) failed at backend/cuda/memory.cpp:41: cudaErrorMemoryAllocation
// (out of memory)".
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace strata::backend::cuda {

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
void check_nccl(ncclResult_t status, const char* call, const char* file, int line);

// After a kernel launch: the launch's own error (bad configuration, no
// kernel image for this GPU), without synchronising.
void check_launch(const char* kernel, const char* file, int line);

}  // namespace strata::backend::cuda

#define STRATA_CUDA_CHECK(call) ::strata::backend::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define STRATA_CUBLAS_CHECK(call) ::strata::backend::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define STRATA_NCCL_CHECK(call) ::strata::backend::cuda::check_nccl((call), #call, __FILE__, __LINE__)
#define STRATA_CUDA_LAUNCHED(kernel) ::strata::backend::cuda::check_launch(kernel, __FILE__, __LINE__)
