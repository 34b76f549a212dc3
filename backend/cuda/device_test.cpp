// GPU check: y = 2·x + y on the first GPU equals the CPU result exactly (2·x
// is exact, so fused and unfused multiply-add agree). Exit 77 (CTest: skipped) without a GPU.
#include <cstdio>
#include <vector>

#include "backend/cuda/device.hpp"

int main() {
  using namespace strata::backend::cuda;
  const auto devs = devices();
  std::printf("NCCL version %d\n", nccl_version());
  if (devs.empty()) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  std::printf("device 0: %s, %.1f GiB, sm_%d%d\n", devs[0].name.c_str(),
              static_cast<double>(devs[0].memory_bytes) / (1024.0 * 1024 * 1024),
              devs[0].sm_major, devs[0].sm_minor);
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 7);
  }
  const auto got = saxpy(0, 2.0f, x, y);
  for (int i = 0; i < n; ++i) {
    const float want = 2.0f * x[i] + y[i];
    if (got[i] != want) {
      std::printf("mismatch at %d: %g != %g\n", i, got[i], want);
      return 1;
    }
  }
  std::printf("saxpy on %d elements matches the CPU\n", n);
  return 0;
}
