// The CUDA backend's doctest main. Without a GPU it exits 77 (CTest: skipped)
// after running only the test suite "host" (what needs no device), so the GPU
// tests show as skipped, not passed; `--host-only` runs just that suite and
// reports it (CTest test cuda.host).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "backend/cuda/device.hpp"

int main(int argc, char** argv) {
  bool host_only = false;
  for (int i = 1; i < argc; ++i) host_only = host_only || std::strcmp(argv[i], "--host-only") == 0;
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  if (host_only) {
    ctx.setOption("test-suite", "host");
    return ctx.run();
  }
  const auto devs = strata::backend::cuda::devices();
  if (devs.empty()) {
    std::printf("no CUDA device: GPU tests skipped\n");
    return 77;
  }
  std::printf("device 0: %s (sm_%d%d)\n", devs[0].name.c_str(), devs[0].sm_major, devs[0].sm_minor);
  return ctx.run();
}
