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
// Executed: plans on one GPU (dp = tp = pp = cp = ep = 1) in fp32, or in
// bf16 mixed precision with fp32 gradient accumulation, with standard
// attention: recompute none / selective / full / every_k / sqrt,
// activation offload, SGD, momentum, Adam, AdamW, 8-bit Adam, LARS, LAMB,
// Adafactor, SM3. Refused with the reason (Executor::unsupported): plans
// needing more than one GPU (multi-process NCCL is not implemented),
// fp16 (needs loss scaling) and fp8, bf16 with bf16 gradients, flash attention, weight and optimizer
// offload, the `optimal` recompute planner, 4-bit Adam (no kernels, nor a CPU
// implementation), dropout, MoE, grouped-query attention.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/executor.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cuda {

struct ExecutorOptions {
  std::uint64_t seed = 1;     // weights (GptModel's device initialisation)
  float lr = 1e-3f;
  float weight_decay = 0.0f;  // L2 (Adam, SGD) or decoupled (AdamW)
  int device = 0;             // CUDA device index
  // Time every matrix product of each step with CUDA events (gemms()).
  bool profile_gemms = false;
};

// A matrix product of the last step (ExecutorOptions::profile_gemms): its
// row-major shape, how many matrices it multiplied at once, its time.
struct StepGemm {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  double seconds = 0;
};

class Executor final : public cpu::StepExecutor {
 public:
  // Lowers the scenario and builds the model, optimizer, streams and events
  // on the device. Throws Error for what it does not execute and when there
  // is no GPU; cuda::OutOfMemory (with the simulator's predicted peak in its
  // message) when the parameters do not fit.
  Executor(const strategies::Scenario& sc, ExecutorOptions opts = {});
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Why this executor cannot run the scenario, or nothing. Needs no GPU.
  static std::optional<std::string> unsupported(const strategies::Scenario& sc);

  std::string_view backend() const override { return "cuda"; }
  int ranks() const override { return 1; }
  const strategies::LoweredStep& lowered() const override;
  bool holds_gpu_workspace() const override { return true; }

  // One training step (global_batch·seq_len tokens and targets). Synchronises
  // at its end: times are final when it returns. A NaN or Inf loss or
  // gradient throws Error naming it (the optimizer step is then skipped on
  // the device); running out of device memory throws cuda::OutOfMemory with
  // the predicted peak beside the numbers. After any failure the executor
  // refuses further steps.
  cpu::StepResult step(std::span<const std::int32_t> tokens,
                       std::span<const std::int32_t> targets) override;
  sim::RunResult measured(const cpu::StepResult& r) const override;

  // The most bytes the device pool reserved during the last step (>= its
  // peak of live bytes: rounding, and memory freed on one stream waiting to
  // be reused on another).
  Bytes reserved_peak() const;
  // With profile_gemms: every matrix product of the last step, in order.
  const std::vector<StepGemm>& gemms() const;

  // Parameters and (after a step) that step's gradients by GptModel name,
  // copied to the host; set_parameters copies named values in (tests start
  // both backends from the same weights).
  std::map<std::string, std::vector<float>> parameters() const;
  std::map<std::string, std::vector<float>> gradients() const;
  void set_parameters(const std::map<std::string, std::vector<float>>& values);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::backend::cuda
