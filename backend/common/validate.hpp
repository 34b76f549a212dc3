#pragma once
// `strata validate SCENARIO --backend cpu|cuda`: the simulator's prediction
// of a plan next to an executor's measurement of the same task graph —
// step time, peak memory per rank and per tag, time per task kind, and
// task by task (docs/validate.md).
//
// Predicted: strategies::predict_step with ModelStepCosts over the
// scenario's calibration (`sc.calibration`: a calibration from `strata
// calibrate --backend cpu|cuda`; the executor lowers with the same one, so both
// run one task graph: overheads decide which framework tasks exist); memory
// from the replayed timeline's pools. The lowering's device pool
// also holds what the GPU model adds and the CPU backend has not: the CUDA
// runtime (MemTag::Runtime) and cuBLAS's workspace (the static Workspace
// buffer); those are left out of the predicted figures and reported as
// `excluded_bytes`. Measured: StepExecutor::step over `steps` steps after
// `warmup` steps; the median step time, each rank's peaks (the largest over
// the measured steps) and task wall times.
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/step_executor.hpp"
#include "costmodel/calibration.hpp"
#include "sim/ranking.hpp"
#include "sim/task_graph.hpp"
#include "lowering/lower.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend {

// What a task's time is spent on, for the per-kind comparison.
enum class WorkKind : std::uint8_t {
  Forward,     // forward of a layer, the embedding or the head
  Backward,
  Recompute,
  Collective,  // data-parallel and ZeRO reductions and gathers, embedding tie, tp/cp/ep
  P2p,         // pipeline sends
  Copy,        // offload and prefetch, weight and state movement
  Optimizer,   // the optimizer step
  Framework,   // framework overhead tasks
  Compression,  // gradient compression's encode and decode (its rounds are collectives)
};
inline constexpr std::size_t kWorkKinds = 9;
std::string_view work_kind_name(WorkKind k);
WorkKind work_kind(strategies::TaskOp op);

struct ValidateOptions {
  int steps = 5;   // measured steps
  int warmup = 1;  // steps run first and not measured (optimizer state, first-touch pages)
  std::uint64_t seed = 1;
  // Set (a signal): the measurement ends after the step in flight, once one
  // step has been measured, and the report holds the steps measured so far
  // (ValidateReport::stopped).
  const std::atomic<bool>* stop = nullptr;
};

struct RankPeaks {
  int rank = 0, stage = 0;
  Bytes peak = 0;          // device pool, all tags at once
  sim::TagBytes by_tag{};  // each tag's own peak
  Bytes host_peak = 0;     // host pool (offloaded activations)
};

struct ValidateSide {
  double step_time_s = 0;
  Bytes peak_memory_bytes = 0;  // the highest rank's device peak
  sim::TagBytes peak_by_tag{};  // the highest rank's peak of each tag
  std::vector<RankPeaks> ranks;  // by global rank
  // Seconds per step spent in tasks of each kind by one rank, averaged over
  // ranks. Measured, a collective or pipeline transfer counts from its last
  // participant's arrival (ValidateReport::measured_peer_wait_s has the rest).
  std::array<double, kWorkKinds> time_by_kind_s{};
};

struct TaskRow {
  std::string id;
  WorkKind kind = WorkKind::Framework;
  int stage = 0;
  double predicted_s = 0;
  double measured_s = 0;  // mean over the stage's ranks and the measured steps
};

struct ValidateReport {
  std::string backend = "cpu";  // the executor's (StepExecutor::backend)
  std::string scenario;
  std::string cluster;
  std::string calibration;  // the calibration's machine and date
  int ranks = 0;
  std::int64_t dp = 1, tp = 1, pp = 1;
  ValidateSide predicted, measured;
  std::vector<double> step_times_s;  // every measured step
  int steps_asked = 0;               // ValidateOptions::steps
  bool stopped = false;              // ended early by ValidateOptions::stop
  std::vector<TaskRow> tasks;
  // The schedule check: the prediction's task graph replayed by the engine
  // with every task taking its time in a measured step instead of the cost
  // model's (the median over the measured steps)
  // (a collective's or pipeline transfer's from its last participant's
  // arrival, since the graph holds the waits before it as dependencies). It checks the schedule — dependencies, lanes, what
  // overlaps what — independently of the cost model: against the measured
  // step it differs only by what the graph does not hold (waits the
  // executor has and the graph lacks, or the reverse). Tasks the executor
  // did not time take 0 (replay_untimed_tasks counts them).
  double replayed_step_time_s = 0;
  int replay_untimed_tasks = 0;
  // Seconds per step and rank the ranks spent inside collectives and
  // pipeline transfers before their last participant arrived: the skew
  // between ranks, which the prediction (every rank of a stage alike) has
  // not. Left out of the measured time by kind.
  double measured_peer_wait_s = 0;
  // Per rank, left out of the predicted device pool: the CUDA runtime and
  // (for an executor without a GPU library workspace) the cuBLAS workspace
  // the GPU memory model adds.
  Bytes excluded_runtime_bytes = 0;
  Bytes excluded_workspace_bytes = 0;
};

// Throws InputError for steps < 1 or warmup < 0.
void check_validate_options(const ValidateOptions& opts);
// Runs the prediction and the measurement on an executor built for `sc`.
// Its seed is its own; opts.seed draws the tokens. Throws Error when its
// task graph differs from the prediction's.
ValidateReport validate(const strategies::Scenario& sc, StepExecutor& ex,
                        const ValidateOptions& opts = {});

// Predicted vs measured: step time, memory per rank and tag, time per kind.
std::string render_validate_table(const ValidateReport& r);
// One object: scenario, cluster, backend, calibration, ranks, dp, tp, pp,
// steps, excluded_bytes {runtime, workspace}, `predicted` and `measured`
// (each: step_time_s, peak_memory_bytes, memory_breakdown_bytes (by tag,
// the highest rank's peak of each), memory_per_rank [{rank, stage,
// peak_bytes, peak_bytes_by_tag, host_peak_bytes}], time_by_kind_s (by
// WorkKind name)), `errors` (step_time, peak_memory: (predicted −
// measured) / measured), measured step_times_s, `replay` {step_time_s,
// error (against the measured step), untimed_tasks}, measured_peer_wait_s, and `tasks` [{id,
// kind, stage, predicted_s, measured_s}].
std::string render_validate_json(const ValidateReport& r);

// Kendall's τ-b (sim/ranking.hpp), for the backend's callers.
using strata::kendall_tau;

}  // namespace strata::backend
