#pragma once
// What the host machine is: recorded in calibration files and in measured
// results so every number says where it came from.
#include <cstdint>
#include <string>

#include "sim/units.hpp"

namespace strata::backend {

struct HostInfo {
  std::string cpu_model;      // "unknown" when it cannot be read
  int logical_cpus = 0;       // hardware threads available to this process
  Bytes memory_bytes = 0;     // physical memory, 0 when unknown
  std::string hostname;
};

HostInfo host_info();

}  // namespace strata::backend
