#pragma once
// `strata fit-convergence`: trains the scenario's model on the CPU executor
// to target losses at several global batch sizes, with the baseline plan and
// with each lossy setting (gradient compression, another optimizer), measures
// the steps to each target, and fits a convergence model to them
// (strategies/convergence_fit.hpp; docs/time-to-train.md).
//
// Data: the Markov corpus over the model's vocabulary (its entropy rate is
// the best loss any model can reach). The held-out loss is measured on a
// fixed set of sequences by a single-rank copy of the parameters; targets
// are that set's own best loss (the corpus's transition probabilities on it)
// plus an offset in nats. The steps to a target are interpolated linearly
// between evaluations.
//
// Learning rates: the baseline tries lr (scaled from the smallest batch by
// lr_scaling) times each multiplier of lr_grid at every batch, and one more
// step of 2x beyond an end of the grid that wins (twice at most), keeping
// the rate with the fewest mean steps; each setting runs at that rate (times
// its own @ multiplier). Constant rates, no warmup.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strategies/convergence_fit.hpp"
#include "strategies/scenario.hpp"

namespace strata::backend::cpu {

struct FitConvergenceOptions {
  std::vector<std::int64_t> batches{2, 4, 8, 16, 32, 64};  // global batches, sequences
  std::vector<std::int64_t> held_out{4, 16};               // of batches: left out of the fit
  // Besides the baseline; empty: the default settings the executor runs,
  // at most max_default_settings of them.
  std::vector<std::string> settings;
  std::size_t max_default_settings = 100;
  int seeds = 2;  // runs per (setting, batch, rate), seeds 1..seeds
  // Nats above the held-out set's best loss: the fit's target, then the
  // targets for the loss scaling (empty: none).
  double target_offset = 0.05;
  std::vector<double> scaling_offsets{0.1, 0.2};
  double lr = 3e-3;  // at the smallest batch
  strategies::LrScaling lr_scaling = strategies::LrScaling::None;  // from there to the others
  std::vector<double> lr_grid{0.5, 1, 2};
  int max_steps = 1500;
  double setting_cap = 6;  // a setting's run stops after this many times the baseline's steps
  std::int64_t eval_sequences = 64;
  std::uint64_t corpus_seed = 1;
  double sharpness = 2;
  strategies::ConvergenceModel base;  // penalties of what is not measured
  // Set (by a signal handler): no run starts after it, the run in flight is
  // dropped at its next step, and fit_convergence returns the runs finished
  // with `stopped` set and nothing fitted (the caller may refit them).
  const std::atomic<bool>* stop = nullptr;
};

// The settings measured when none are given, in this order.
std::vector<std::string> default_fit_settings();

// Trains and fits (unless stopped: see `stop`). `log` (optional) sees one
// line per run. Throws InputError for a scenario or setting the executor
// cannot run, or batches the plan cannot split; Error when the baseline
// cannot be fitted.
strategies::FitRecord fit_convergence(const strategies::Scenario& sc, const FitConvergenceOptions& o,
                                      const std::function<void(const std::string&)>& log = {});

// Fits a record's runs again (fit_convergence's last step): the baseline's
// optimizer from the scenario, the unmeasured penalties from `base`, the
// model, its description and its values' sources. `strata fit-convergence
// --refit FILE` does this to a fitted file's measurements without training.
void refit(const strategies::Scenario& sc, strategies::FitRecord& rec, const strategies::ConvergenceModel& base);

}  // namespace strata::backend::cpu
