#include "backend/cpu/host_info.hpp"

#include <doctest/doctest.h>

namespace strata::backend {
namespace {

TEST_CASE("host info reads this machine") {
  // Any Linux host has at least one CPU and some memory.
  const auto h = host_info();
  CHECK(h.logical_cpus >= 1);
  CHECK(h.memory_bytes > 64 * kMiB);
  CHECK(!h.cpu_model.empty());
}

}  // namespace
}  // namespace strata::backend
