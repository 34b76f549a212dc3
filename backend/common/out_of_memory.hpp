#pragma once
// A pool of fixed size running out: what the CPU backend's allocators throw
// beyond their capacity (a device running out of memory), and the report
// `run` and `validate` give with the memory model's prediction beside it.
// (The CUDA backend's cuda::OutOfMemory carries the device's own numbers and
// the simulator's prediction already.)
#include <string>

#include "backend/common/memory_stats.hpp"
#include "sim/error.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend {

// An allocation beyond a pool's capacity. `where` names the pool (e.g.
// "rank 3 (stage 1) device"), or is empty.
class OutOfMemory : public Error {
 public:
  OutOfMemory(Bytes requested, Bytes live, Bytes capacity, MemTag tag, std::string where = "");
  Bytes requested() const { return requested_; }
  Bytes live() const { return live_; }
  Bytes capacity() const { return capacity_; }
  MemTag tag() const { return tag_; }

 private:
  Bytes requested_, live_, capacity_;
  MemTag tag_;
};

// A step of `run` or `validate` that ran out of device memory: the
// executor's OutOfMemory with the memory model's prediction beside it
// (out_of_memory_report). The CLI exits 3 on it: the plan does not fit,
// which is neither bad input nor an internal error.
class StepOutOfMemory : public Error {
 public:
  using Error::Error;
};

// The message of a step's OutOfMemory with the memory model's predicted
// peak for the plan beside it (without the GPU-only runtime and cuBLAS
// bytes, as `validate` compares), for `run` and `validate` to report.
std::string out_of_memory_report(const OutOfMemory& e, const strategies::Scenario& sc);

}  // namespace strata::backend
