#pragma once
// The CPU executor: runs the task graph the simulator replays, for real.
//
// A scenario is lowered with strategies::lower_step (the cost model's
// durations, which the executor ignores); each rank of the dp·pp mesh is a
// thread that walks its pipeline stage's tasks in graph order and does what
// each task's TaskInfo says: the forward, backward or recompute of a layer
// for a microbatch over GptModel's per-layer steps, a pipeline send (the
// receiver takes the message when its next task needs it), a bucket's
// all-reduce or reduce-scatter over the dp group, a ZeRO-3 gather or
// reduce-scatter of one layer, an activation copy to the host pool and back,
// the optimizer step, the all-gather of updated weights. Collectives are
// the ring algorithms of comm.hpp over shared memory.
//
// Every tensor a rank holds comes from that rank's TrackingAllocator (its
// device pool) or its host allocator (offloaded activations), so the peaks
// by tag are the bytes the step really held. Each task's wall start and end
// are recorded under its task index (the graph's ids name them).
//
// What it executes, and what it refuses with the reason, is the capability
// table's (backend/common/capabilities.hpp, rendered as the feature matrix
// of docs/cpu-backend.md): unsupported() returns its first refused row. The
// buckets, each rank's shards and the seeds are the bucket plan's
// (backend/common/bucket_plan.hpp), which the CUDA executor shares.
//
// Numerics: fp32 throughout whatever the plan's precision; standard
// attention whatever the plan's kernel; dropout off (p = 0). Microbatch mb
// of dp rank d holds the global batch's sequences from (d·m + mb)·micro, and
// each adds the gradient of loss / (m·dp), so the reduced gradient is the
// global batch's mean, as one rank stepping the whole batch computes it.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/step_executor.hpp"
#include "backend/cpu/allocator.hpp"
#include "sim/engine.hpp"
#include "lowering/lower.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cpu {

// Each rank's device pool holds the cluster GPU's memory_GiB: a step that
// needs more throws OutOfMemory (allocator.hpp) naming the rank.
struct ExecutorOptions {
  std::uint64_t seed = 1;      // weights (GptModel's initialisation)
  float lr = 1e-3f;            // the optimizer's learning rate
  float weight_decay = 0.0f;   // L2 (Adam, SGD) or decoupled (AdamW, 8-bit Adam)
  // Keep the reduced gradient of every parameter of the last step, as the
  // optimizer saw it (tests compare it with one rank's).
  bool capture_gradients = false;
  // Optimizer offload to NVMe (ZeRO-Infinity): the directory its states'
  // files go to (the drive's mount); empty: the system's temporary directory.
  std::string storage_dir;
};

class Executor final : public StepExecutor {
 public:
  // Lowers the scenario and builds every rank's model (same seed, so all
  // replicas start equal), optimizer and communicators. Throws Error for
  // what it does not execute.
  Executor(const strategies::Scenario& sc, ExecutorOptions opts = {});
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Why the executor cannot run this scenario (the capability table's first
  // refused row), or nothing.
  static std::optional<std::string> unsupported(const strategies::Scenario& sc);
  // Declares what this backend's kernels do where the plan does not say it
  // otherwise, for its own lowering and the prediction beside a run: what
  // they hold (KernelMemory::Cpu) and context parallelism's K/V all-gather
  // (implementation.cp_comm all_gather, GptModel::gather_kv; a plan that
  // states p2p is refused), and sequence parallelism's input gathered
  // again in the backward (implementation.sp_regather_input true,
  // GptModel::whole_rows; a plan that states false is refused), and
  // ZeRO-3's gradients reduce-scattered layer by layer
  // (implementation.zero3_reduce_bucket 0; a stated bucket is refused) and
  // its layers gathered one ahead (zero3_max_live 0; a stated coordinator
  // is refused), without rank-by-rank host work (zero3_host_per_rank
  // false; a stated true is refused).
  static void declare_kernels(strategies::Scenario& sc);
  // Throws InputError (the scenario's file) when every rank's predicted peak
  // and host bytes (the analytical memory model) add up to more than
  // `host_memory` bytes: the backend allocates them for real, and a model
  // too large for the host would end in an allocation failure or an
  // out-of-memory kill. 0: the host's memory is unknown, no check.
  static void require_host_memory(const strategies::Scenario& sc, Bytes host_memory);

  std::string_view backend() const override { return "cpu"; }
  // One thread per rank runs its stage's tasks in graph order.
  bool serial_ranks() const override { return true; }
  int ranks() const override;
  std::int64_t global_batch() const;  // sequences per step
  std::int64_t seq_len() const;
  const strategies::LoweredStep& lowered() const override;

  // One training step. tokens and targets hold global_batch()·seq_len() ids,
  // sequence after sequence.
  StepResult step(std::span<const std::int32_t> tokens,
                  std::span<const std::int32_t> targets) override;

  // The parameters now, by GptModel name, assembled from the ranks that own
  // them (shards included).
  std::map<std::string, std::vector<float>> parameters() const;
  // With capture_gradients: the last step's reduced gradients, by name.
  const std::map<std::string, std::vector<float>>& gradients() const;

  // A step's measured task times as a replay result of lowered().graph, for
  // sim::chrome_trace: each stage's tasks as its dp-rank-0 rank (the
  // lowering's representative) ran them, in ns since the step began; no
  // resource or pool usage.
  sim::RunResult measured(const StepResult& r) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::backend::cpu
