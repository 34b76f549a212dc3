#pragma once
// Fitting a convergence model (convergence.hpp) to measured steps-to-target:
// what `strata fit-convergence` does with the runs it trains on the CPU
// backend (backend/cpu/fit_convergence.hpp). Pure arithmetic over the
// measurements, so it is tested on made-up runs whose answer is known.
//
//   S_min, B_noise  least squares of S(B) = S_min + E_min / B on relative
//                   errors, over the baseline's runs at the batches not held out
//                   (the learning rate with the fewest steps at each batch);
//   penalties       per lossy setting, least squares of its own S(B) =
//                   S_min (factor + noise_factor · B_noise/B) over the same
//                   batches (a factor on S_min and one on E_min), or, with
//                   one batch or when that gives no positive pair, one
//                   factor: the geometric mean of measured / S(B); top-k
//                   and random-k without error feedback also fit the bias
//                   term (1 + bias_factor·B_noise/B) (fit_biased_penalty);
//   loss scaling    with several targets, the slopes of log S_min over
//                   log(L − floor) and of log B_noise over log L;
//   held-out error  |predicted − measured| / measured at the held-out batches.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strategies/convergence.hpp"

namespace strata::strategies {

// What one measured series changes against the baseline.
struct FitSetting {
  std::string name;  // as given: "none", "topk:0.01", "topk:0.01:noef", "qsgd:4", "opt:adam8bit@2"
  Compression compression;
  std::optional<Optimizer> optimizer;  // unset: the scenario's
  // An asynchronous schedule, run as a pipeline of 2 stages (its weights
  // one version behind); unset: the scenario's.
  std::optional<Schedule> schedule;
  double lr_multiplier = 1;            // on the baseline's best rate at each batch
  bool baseline() const {
    return compression.method == CompressionMethod::None && !optimizer && !schedule;
  }
};
// Parses "none", "topk:RATIO[:noef]", "randomk:RATIO[:noef]", "qsgd:BITS",
// "onebit", "powersgd:RANK", "opt:OPTIMIZER" or "sched:pipedream-2bw" (or
// "sched:pipedream"), each with an optional "@MULTIPLIER" of the learning
// rate. Throws InputError naming `option`.
FitSetting parse_fit_setting(const std::string& text, const std::string& option);

// One training run: the steps at which the held-out loss first reached each
// target (fractional: interpolated between evaluations), nothing where it did
// not within `cap` steps.
struct FitRun {
  std::string setting;
  std::int64_t batch = 0;  // sequences
  double lr = 0;
  std::uint64_t seed = 0;
  std::int64_t cap = 0;
  std::vector<std::optional<double>> steps;  // per FitInput::target_losses
};

struct FitInput {
  std::vector<FitSetting> settings;  // the baseline first
  std::vector<FitRun> runs;
  std::int64_t seq_len = 1;
  std::vector<double> target_losses;  // the first is the model's target
  double loss_floor = 0;              // the best loss the data allows
  std::vector<std::int64_t> held_out;  // batches left out of the fit
  Optimizer optimizer = Optimizer::Adam;  // the baseline's
  ConvergenceModel base;  // penalties for what was not measured, with their sources
  std::string source;     // how the runs were made, for the fitted values' sources
};

// The runs of one setting at one batch and rate, summarised.
struct FitPoint {
  std::string setting;
  std::int64_t batch = 0;
  double lr = 0;
  bool held_out = false;
  int runs = 0, reached = 0;
  std::optional<double> mean, min, max;  // over the runs that reached the target
  double predicted = 0;                  // by the fitted model
  std::optional<double> error;           // |predicted − mean| / mean, all runs reached
};

struct FitOutcome {
  ConvergenceModel model;
  std::vector<std::pair<std::string, Penalty>> penalties;  // per fitted setting, by name
  std::vector<FitPoint> points;            // per setting and batch, the rate used
  std::vector<CriticalBatch> per_target;   // the baseline fit at each target loss
  std::optional<double> held_out_max_error, held_out_median_error;
  std::vector<std::string> notes;          // settings or batches that could not be fitted
};

// The mean steps to the first target of the runs of (setting, batch, lr);
// +inf when one of them did not reach it, or there are none.
double mean_steps_to_target(const FitInput& in, const std::string& setting, std::int64_t batch, double lr);
// The learning rate of the baseline's runs at `batch` with the fewest mean
// steps to the first target (a run that did not reach it counts as never);
// nothing without baseline runs there.
std::optional<double> best_lr(const FitInput& in, std::int64_t batch);

// Least squares of S(B) = S_min + E_min / B on relative errors; B in
// tokens. Throws Error with fewer than two distinct batches, or when the
// steps fall faster than 1/B (no positive S_min).
struct StepsAtBatch {
  double batch_tokens = 0;
  double steps = 0;
};
CriticalBatch fit_critical_batch(const std::vector<StepsAtBatch>& pts);
// One factor: exp(mean(log(steps / S(B)))).
double fit_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c);
// Both factors against the baseline `c` (fit_critical_batch of the
// setting's own steps: S_min'/S_min and E_min'/E_min), or one
// (fit_penalty) when fewer than two batches or no positive pair.
Penalty fit_two_factor_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c);
// A biased compressor without error feedback: the two factors and
// bias_factor b of S(B) = S_min (factor + noise_factor B_noise/B)
// (1 + b·B_noise/B), least squares on relative errors — the two factors for
// each b of a grid (0, and 2^(k/8) for k = −64…64), the b with the least
// residual. Needs three or more batches; otherwise the two factors.
Penalty fit_biased_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c);
// Least-squares slope of log y over log x.
double log_slope(const std::vector<double>& x, const std::vector<double>& y);

// Fits everything above. Throws Error when the baseline cannot be fitted.
FitOutcome fit_convergence_model(const FitInput& in);

// What `strata fit-convergence` measured and fitted: the fitted file and the
// report are rendered from it (report/convergence_fit.hpp).
struct FitRecord {
  FitInput input;
  FitOutcome outcome;
  std::string scenario;   // the scenario trained
  std::string data;       // what the tokens were
  double entropy_rate = 0;  // of the corpus: the best expected loss
  std::int64_t eval_sequences = 0;
  std::vector<std::string> skipped;  // settings the executor does not run
  // A stop request ended the training early: `input.runs` holds the runs
  // that finished, `outcome` is not fitted. Not part of the file.
  bool stopped = false;
};

}  // namespace strata::strategies
