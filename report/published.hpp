#pragma once
// Prediction against published measurements (`strata validate-published`):
// each counted case of ../shared/validation/published_cases.json becomes a
// scenario (settings the source does not state get documented defaults,
// listed in docs/accuracy.md), is simulated, and its step time, throughput
// or FLOP rate is compared with the measurement.
#include <optional>
#include <string>
#include <vector>

#include "report/format.hpp"

namespace strata::report {

struct PublishedRow {
  std::string id;
  std::string family;
  std::string metric;  // "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu"
  double measured = 0;
  std::optional<double> predicted;  // absent: Strata cannot express or fit it
  double error_pct = 100;           // |predicted − measured| / measured, 100 when absent
  // error_pct with a sign: > 0 when the prediction is faster than the
  // measurement (a shorter step, a higher throughput or FLOP rate).
  double faster_pct = 0;
  bool counted = true;  // false: listed with its reason (note), in no MAPE
  std::string note;     // the settings chosen, or why it failed or is not counted
};

// Plans of one model ranked: the counted, predicted cases of a family with
// the same model, GPUs (count and kind) and metric (rows that differ only
// in their parallel layout, batch, recompute or precision). What a user choosing
// among them learns: whether the prediction orders them as measured, and
// how much slower the plan it ranks first ran than the best one.
struct PublishedGroup {
  std::string family;
  std::vector<std::string> ids;
  // Kendall's τ-b of the predicted against the measured values; absent
  // when either series has a single value (no ranking to compare).
  std::optional<double> tau;
  // How much slower the plan with the best prediction ran than the best
  // measured plan, in percent (0 when it is the best): measured time over
  // the best one's less one (throughputs inverted). Among plans predicted
  // equally best, the slowest measured.
  double first_shortfall_pct = 0;
};

// A family's groups: their count, the median τ-b of those with one, and
// the mean shortfall of the plan ranked first.
struct PublishedRanking {
  std::string family;
  int groups = 0;
  std::optional<double> median_tau;
  double mean_first_shortfall_pct = 0;
};

struct PublishedReport {
  std::vector<PublishedRow> rows;
  std::vector<PublishedGroup> groups;
  std::vector<PublishedRanking> ranking_by_family;
  // Mean absolute percentage error by family and over every counted case.
  std::vector<std::pair<std::string, double>> mape_by_family;
  // Mean of faster_pct by family and over every counted case: > 0, the
  // family is predicted optimistic on average.
  std::vector<std::pair<std::string, double>> bias_by_family;
  double mape = 0;
  double bias = 0;
  int counted = 0;
};

// Reads the cases file and predicts every counted case. Throws InputError for
// an unreadable file.
PublishedReport validate_published(const std::string& cases_file);

std::string render_published(const PublishedReport& r, Format f);
// The report as a Markdown table (docs/accuracy.md).
std::string published_markdown(const PublishedReport& r);

}  // namespace strata::report
