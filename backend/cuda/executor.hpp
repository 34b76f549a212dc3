#pragma once
// The CUDA executor: runs the task graph the simulator replays on one GPU,
// measuring every task with CUDA events under its task index. Plain C++ (no
// CUDA types): the application includes it.
//
// A scenario is lowered with strategies::lower_step, exactly as the CPU
// executor (backend/cpu/executor.hpp) and the simulator lower it; this
// executor walks the tasks in graph order and enqueues each on the CUDA
// stream of its resource (the stage's compute stream, its device-to-host and
// host-to-device copy engines), with an event for every dependency between
// streams and a pair of timing events around the task. Forward, backward and
// recompute tasks run the layer for the microbatch (cuda::GptModel: cuBLAS
// GEMMs and the kernels of kernels.cu), offload and prefetch move a layer's
// saved tensors to pinned host memory and back on the copy streams, the
// optimizer step runs fused kernels. Every device byte comes from a tracking
// allocator (a CUDA memory pool, stream-ordered), every offloaded byte from
// a pinned pool, so the peaks by tag are the bytes the step really held.
//
// Multi-GPU: one process per GPU (ExecutorOptions::group, process_group.hpp).
// Every process lowers the same step and walks the same tasks in the same
// order as the rank of the plan's mesh it is, exactly as a CPU rank thread
// walks its stage's tasks (backend/cpu/executor.cpp): its microbatches are
// the global batch's sequences from (dp_index·m + mb)·micro. The graph's
// collective tasks become NCCL calls over the dp group on the stage's
// communication stream (`s0.comm`), ordered against compute by the graph's
// edges as events: a bucket's all-reduce (ZeRO 0) or reduce-scatter (ZeRO
// 1/2) of its flat gradients, the all-gather of updated weights (ZeRO 1/2),
// ZeRO-3's per-layer all-gathers and reduce-scatters. After each step the
// processes exchange their measurements (MPI), so every process returns the
// whole run's StepResult.
//
// What it executes, and what it refuses with the reason, is the capability
// table's (backend/common/capabilities.hpp, rendered as the feature matrix
// of docs/cpu-backend.md): unsupported() returns its first refused row,
// then whether the processes launched are the plan's GPUs. The buckets,
// each rank's shards and the compressor's seed are the bucket plan's
// (backend/common/bucket_plan.hpp), the CPU executor's too.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/step_executor.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cuda {

class ProcessGroup;

struct ExecutorOptions {
  std::uint64_t seed = 1;     // weights (GptModel's device initialisation)
  float lr = 1e-3f;
  float weight_decay = 0.0f;  // L2 (Adam, SGD) or decoupled (AdamW)
  int device = 0;             // CUDA device index (a multi-GPU run: the process's local rank)
  // The processes of a multi-GPU run (one per GPU; it must outlive the
  // executor), or null: this process alone. Its size must be the plan's
  // GPU count.
  const ProcessGroup* group = nullptr;
  // Time every matrix product of each step with CUDA events (gemms()).
  bool profile_gemms = false;
};

// A matrix product of the last step (ExecutorOptions::profile_gemms): its
// row-major shape, how many matrices it multiplied at once, its time.
struct StepGemm {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double seconds = 0;
};

class Executor final : public StepExecutor {
 public:
  // Lowers the scenario and builds the model, optimizer, streams and events
  // on the device. Throws Error for what it does not execute and when there
  // is no GPU; cuda::OutOfMemory (with the simulator's predicted peak in its
  // message) when the parameters do not fit.
  Executor(const strategies::Scenario& sc, ExecutorOptions opts = {});
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Why this executor cannot run the scenario with `processes` processes
  // (one per GPU): the capability table's first refused row, or a plan
  // whose GPUs are not the processes launched (saying how many and how to
  // launch them); or nothing. Needs no GPU.
  static std::optional<std::string> unsupported(const strategies::Scenario& sc, int processes = 1);

  std::string_view backend() const override { return "cuda"; }
  int ranks() const override;
  const strategies::LoweredStep& lowered() const override;
  bool holds_gpu_workspace() const override { return true; }

  // One training step (global_batch·seq_len tokens and targets). Synchronises
  // at its end: times are final when it returns. A NaN or Inf loss or
  // gradient throws Error naming it (the optimizer step is then skipped on
  // the device); running out of device memory throws cuda::OutOfMemory with
  // the predicted peak beside the numbers. After any failure the executor
  // refuses further steps.
  StepResult step(std::span<const std::int32_t> tokens,
                       std::span<const std::int32_t> targets) override;
  sim::RunResult measured(const StepResult& r) const override;

  // The most bytes the device pool reserved during the last step (>= its
  // peak of live bytes: rounding, and memory freed on one stream waiting to
  // be reused on another).
  Bytes reserved_peak() const;
  // With profile_gemms: every matrix product of the last step, in order.
  const std::vector<StepGemm>& gemms() const;

  // Parameters and (after a step) that step's gradients by GptModel name,
  // copied to the host; set_parameters copies named values in (tests start
  // both backends from the same weights). With ZeRO-3 over several
  // processes parameters() all-gathers the layers' shards (every process
  // must call it) and set_parameters keeps this rank's shard; gradients()
  // are the reduced ones with ZeRO 0, this rank's own before reduction
  // otherwise.
  std::map<std::string, std::vector<float>> parameters() const;
  std::map<std::string, std::vector<float>> gradients() const;
  void set_parameters(const std::map<std::string, std::vector<float>>& values);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::backend::cuda
