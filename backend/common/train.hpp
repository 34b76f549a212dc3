#pragma once
// `strata run SCENARIO --backend cpu|cuda`: N training steps of the
// scenario's plan on an executor (any StepExecutor), over a byte-level text file or the synthetic
// Markov corpus (whose entropy rate is the best loss any model can reach),
// with the loss, wall time and peak memory of every step.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/common/memory_stats.hpp"
#include "backend/common/step_executor.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend {

struct TrainOptions {
  int steps = 50;
  std::string data;            // a text file (byte-level tokens); empty: the Markov corpus
  std::uint64_t seed = 1;      // weights, corpus and batches
  float lr = 3e-3f;            // the optimizer's (the executor's options)
  float weight_decay = 0.0f;
  double markov_sharpness = 2.0;
  bool trace = false;          // keep the last step's measured Chrome trace
  // When set (a signal handler sets it), training ends after the step in
  // flight: the report holds the steps measured so far (TrainReport::stopped).
  const std::atomic<bool>* stop = nullptr;
};

struct TrainStep {
  int step = 0;  // 1-based
  double loss = 0;
  double seconds = 0;
};

struct TrainRankMemory {
  int rank = 0, stage = 0;
  MemoryStats device;  // peaks over the whole run
  MemoryStats host;
};

struct TrainReport {
  std::string backend = "cpu";  // the executor's (StepExecutor::backend)
  std::string scenario;  // file or model name
  std::string cluster;
  std::string data;      // what the tokens were
  std::optional<double> best_loss;  // the Markov corpus's entropy rate
  int ranks = 0;
  std::int64_t dp = 1, tp = 1, pp = 1;
  std::int64_t global_batch = 0, seq_len = 0;
  std::vector<TrainStep> steps;
  int steps_asked = 0;
  bool stopped = false;  // ended early by TrainOptions::stop
  std::vector<TrainRankMemory> memory;  // by rank
  double predicted_step_s = 0;  // the simulator's replay of the same task graph
  std::int64_t tasks_per_step = 0;
  std::string trace;  // with TrainOptions::trace: the last step, sim::chrome_trace's format
};

// Throws InputError for steps < 1 and for a byte-level --data file with a
// model vocabulary other than 256 (checked before an executor is built).
void check_train_options(const strategies::Scenario& sc, const TrainOptions& opts);

// Runs the steps on an executor built for `sc` (its seed, learning rate and
// decay are its own: opts.seed draws the data); `on_step` (optional) sees
// each one as it finishes. Throws InputError for an unreadable --data file
// or a byte-level file with a model vocabulary other than 256.
TrainReport train(const strategies::Scenario& sc, StepExecutor& ex, const TrainOptions& opts,
                  const std::function<void(const TrainStep&)>& on_step = {});

std::string render_train_table(const TrainReport& r);
// One JSON object: scenario, cluster, backend, data, best_loss, ranks, dp, tp, pp,
// global_batch, seq_len, tasks_per_step, predicted_step_time_s, steps
// [{step, loss, step_time_s}], median_step_time_s, peak_memory_bytes (highest
// rank), memory_per_rank [{rank, stage, peak_bytes, peak_bytes_by_tag,
// host_peak_bytes}].
std::string render_train_json(const TrainReport& r);

}  // namespace strata::backend
