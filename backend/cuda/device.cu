#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "backend/cuda/device.hpp"
#include "sim/error.hpp"

namespace strata::backend::cuda {

namespace {

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                cudaGetErrorString(e));
}

#define STRATA_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

__global__ void saxpy_kernel(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

std::vector<DeviceInfo> devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return {};
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, static_cast<Bytes>(p.totalGlobalMem), p.major, p.minor,
                   p.multiProcessorCount});
  }
  return out;
}

int nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

std::vector<float> saxpy(int index, float a, const std::vector<float>& x, std::vector<float> y) {
  if (x.size() != y.size()) throw Error("saxpy: x and y differ in size");
  const int n = static_cast<int>(x.size());
  STRATA_CUDA_CHECK(cudaSetDevice(index));
  float *dx = nullptr, *dy = nullptr;
  const std::size_t bytes = x.size() * sizeof(float);
  STRATA_CUDA_CHECK(cudaMalloc(&dx, bytes));
  try {
    STRATA_CUDA_CHECK(cudaMalloc(&dy, bytes));
    STRATA_CUDA_CHECK(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice));
    saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    STRATA_CUDA_CHECK(cudaGetLastError());
    STRATA_CUDA_CHECK(cudaMemcpy(y.data(), dy, bytes, cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(dx);
    cudaFree(dy);
    throw;
  }
  cudaFree(dx);
  cudaFree(dy);
  return y;
}

}  // namespace strata::backend::cuda
