#pragma once
// Stragglers: GPUs slower than their class (cluster.slow, fixed) and
// slowdowns drawn afresh every step (cluster.stragglers); docs/step-time.md,
// "Stragglers".
//
// A slow GPU's kernels take `factor` times as long: the compute, recompute
// and optimizer time of its stage's compute lane. Its communication, copies
// and host work keep their time (the links and the host are not the slow
// part). A pipeline stage runs at the pace of its slowest GPU, in any
// data-parallel replica: tensor- and context-parallel groups synchronise
// each layer, and a stage's replicas meet at every gradient (and ZeRO)
// collective, where the others wait for the slowest. Simulating each stage
// at its slowest GPU's pace is exact when one stage holds every slow GPU
// (pp = 1, or a single straggler: the replica holding it is the critical
// path and the others wait for it), and an upper bound when slow GPUs sit in
// different stages of different replicas (each real task is at most as long
// as its simulated one, and the replay is monotone in task times).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lowering/step_program.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

// Each pipeline stage's factor from cluster.slow: the largest among its
// GPUs (1 where none is slow). Empty when the cluster lists none.
std::vector<double> fixed_stage_slowdown(const Scenario& sc);

// Multiplies, in every stage s, the compute lane's compute, recompute and
// optimizer time by factor[s] (a merged pass's parts of those kinds, its
// communication parts unchanged). factor.size() == p.stages.
void slow_down(StepProgram& p, std::span<const double> factor);

// The step's time over cluster.stragglers' samples: each sample draws a
// factor per GPU (times cluster.slow's), gives each stage its slowest GPU's
// and replays the program. With backup replicas k, the k replicas whose
// slowest GPU is slowest are not waited for.
struct StepDistribution {
  double mean_s = 0, p50_s = 0, p90_s = 0, p99_s = 0, max_s = 0;
};
struct StragglerStats {
  std::int64_t samples = 0;
  double nominal_s = 0;  // the program as given (cluster.slow applied)
  StepDistribution all;  // waiting for every replica
  std::int64_t backup_replicas = 0;
  std::optional<StepDistribution> with_backup;  // waiting for the fastest dp − k
  // Asynchronous data parallelism (dp > 1): no replica waits for another,
  // each applies its gradients when its own step ends. Per sample, the time
  // per global batch of sequences: dp / Σ 1/T_i, T_i replica i's step at its
  // slowest GPU's pace (every stage at that factor: exact for pp = 1, an
  // upper bound otherwise). Its gradients are then up to dp − 1 updates
  // stale, which this does not price.
  std::optional<StepDistribution> asynchronous;
};
// Nothing when the cluster has no stragglers model. `p` is the scenario's
// program with cluster.slow applied (build_step_program's); unchanged on
// return.
std::optional<StragglerStats> straggler_distribution(const Scenario& sc, StepProgram& p);

}  // namespace strata::strategies
