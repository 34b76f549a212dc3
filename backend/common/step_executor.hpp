#pragma once
// The interface every executor implements (the CPU backend's rank threads,
// the CUDA backend's one process per GPU) and what one measured step
// returns. `strata validate` and `strata run` drive any implementation
// (validate.hpp, train.hpp), so both backends share the comparison with the
// simulator and the rendering. What each executor runs is the capability
// table's (capabilities.hpp).
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "backend/common/memory_stats.hpp"
#include "sim/engine.hpp"
#include "lowering/lower.hpp"

namespace strata::backend {

// One task run by one rank: seconds since the step began.
struct TaskTime {
  std::int32_t task = 0;  // index into lowered().graph.tasks()
  int rank = 0;
  double start = 0, end = 0;
  // The rank's live device bytes under MemTag::Activations when the task
  // ended: what the schedule keeps between its tasks (the CPU executor's;
  // the CUDA executor leaves it 0).
  Bytes activations = 0;
};

struct RankMemory {
  int rank = 0;
  int stage = 0;
  MemoryStats device;  // peaks over the step (live bytes at its start included)
  MemoryStats host;
  MemoryStats storage;  // optimizer offload to NVMe: the states' files
};

struct StepResult {
  double loss = 0;     // mean cross-entropy over the global batch
  double seconds = 0;  // wall time of the step
  std::vector<RankMemory> memory;  // by global rank
  std::vector<TaskTime> tasks;     // every rank's, rank by rank in execution order
  // Pipeline receives (the CPU executor's; the CUDA executor leaves it
  // empty): `task` is the send the receive completes, `rank` the receiver,
  // from when it asked for the message to when it held it — so a receiver
  // that waited shows when the message reached it, its thread's wake-up
  // included, which no task of its own holds (its consuming task is timed
  // from the receive's return).
  std::vector<TaskTime> receipts;
};

// An executor of one plan's lowered step, measured into a StepResult.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual std::string_view backend() const = 0;  // "cpu", "cuda"
  virtual int ranks() const = 0;
  virtual const strategies::LoweredStep& lowered() const = 0;
  // One training step. tokens and targets hold global_batch·seq_len ids,
  // sequence after sequence.
  virtual StepResult step(std::span<const std::int32_t> tokens,
                          std::span<const std::int32_t> targets) = 0;
  // A step's measured task times as a replay result of lowered().graph, for
  // sim::chrome_trace (each stage's representative rank).
  virtual sim::RunResult measured(const StepResult& r) const = 0;
  // Whether the device pool holds a GPU library workspace (cuBLAS's): the
  // lowering's static Workspace buffer stands for it, so validate compares
  // it instead of leaving it out.
  virtual bool holds_gpu_workspace() const { return false; }
  // Whether each rank runs its tasks one after another in program order on
  // one thread (Scenario::serial_ranks): a prediction beside this
  // executor's measurement lowers with the same setting.
  virtual bool serial_ranks() const { return false; }
};

}  // namespace strata::backend
