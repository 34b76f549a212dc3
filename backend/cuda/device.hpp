#pragma once
// CUDA devices visible to this process. Plain C++ header: no CUDA types, so
// code that does not build CUDA can still include it.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/error.hpp"
#include "sim/units.hpp"

namespace strata::backend::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  Bytes memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
};

// The device could not give an allocation. An Error like any other, with
// the numbers, so a caller can put them beside a predicted peak.
class OutOfMemory : public Error {
 public:
  OutOfMemory(const std::string& what, Bytes requested, Bytes live, Bytes device_free,
              Bytes device_total)
      : Error(what), requested(requested), live(live), device_free(device_free),
        device_total(device_total) {}
  Bytes requested;     // the allocation that failed
  Bytes live;          // bytes the tracking allocator held at that moment
  Bytes device_free;   // cudaMemGetInfo's free and total bytes then
  Bytes device_total;
};

// Empty when no driver or no GPU is present (never throws for that).
std::vector<DeviceInfo> devices();

// NCCL version as major*10000 + minor*100 + patch (works without a GPU).
int nccl_version();

// Runs y = a·x + y on device `index` over `n` elements and returns y; throws
// strata::Error naming the failing call, file and line.
std::vector<float> saxpy(int index, float a, const std::vector<float>& x, std::vector<float> y);

}  // namespace strata::backend::cuda
