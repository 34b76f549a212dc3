#pragma once
// `strata explore` and `strata merge` on disk (docs/explore.md):
//   DIR/results.jsonl  one line per scored plan, appended as each finishes
//                      (whole lines, flushed at least every 50 ms): plan_id (16 hex digits, FNV-1a 64 of the
//                      canonical {batch, plan}), batch, plan and the fields
//                      of `strata simulate --format json`;
//   DIR/refined.jsonl  the plans summary.json keeps (Pareto front, top plans),
//                      re-simulated at layer granularity (results.jsonl
//                      holds every plan at the coarse level the explorer
//                      scores with), written whole at the end;
//   DIR/summary.json   counts, rejections per rule, pruning per memory pool,
//                      the Pareto front and the top plans (whole records),
//                      written whole (temporary file and rename). It is a
//                      function of the scenario and the shard only: the same
//                      for any --jobs, resumed or not.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "report/format.hpp"
#include "strategies/explore.hpp"

namespace strata::report {

struct ExploreRunOptions {
  std::string out_dir;
  bool resume = false;  // continue DIR/results.jsonl (without it, an existing one is an error)
  int jobs = 0;         // 0: hardware threads
  std::uint64_t shard_index = 0, shard_count = 1;
  std::size_t top_k = 10;
  std::optional<strategies::RankBy> rank_by;  // unset: time to train with a goal, else throughput
  std::uint64_t max_plans = strategies::kDefaultMaxPlans;
  strategies::Scorer scorer;  // empty: the coarse level (strategies::coarse_scorer)
  strategies::Scorer refine;  // re-scores the kept plans (strategies::ExploreOptions::refine)
  std::function<void(const strategies::Progress&)> on_progress;
  double progress_interval_s = 1.0;
};

struct ExploreReport {
  std::string summary_json;  // as written to DIR/summary.json
  strategies::ExploreResult result;  // wall_s, resumed: this run's
  std::uint64_t torn_bytes = 0;      // cut from the end of results.jsonl on resume
  int jobs = 0;
};

// Explores `sc.space` (a scenario without one is a space of its one plan).
// Throws InputError for a bad output directory.
ExploreReport run_explore(const strategies::Scenario& sc, const ExploreRunOptions& o);

// Combines the output directories of shards (`--shard i/n`, the same
// scenario) into `out_dir`: results deduplicated by plan id (the same id with
// different figures is an error), counts summed, Pareto front and top plans
// recomputed. Returns the summary written.
std::string merge_explore(const std::vector<std::string>& dirs, const std::string& out_dir);

// The records of a results.jsonl by plan id. A last line without its newline
// (a run killed mid-write) is ignored; `valid_bytes` is where it starts. A
// malformed line elsewhere, or one plan id with two different records, is an
// InputError naming the line.
struct ResultsFile {
  std::unordered_map<std::uint64_t, strategies::ScoredPlan> plans;
  std::unordered_map<std::uint64_t, std::string> lines;  // those keep_line asked for
  std::unordered_set<std::uint64_t> inexact;  // records with "exact": false (folded figures)
  std::uint64_t valid_bytes = 0;
  std::uint64_t torn_bytes = 0;
};
ResultsFile read_results(const std::string& path,
                         const std::function<bool(std::uint64_t)>& keep_line = {});
// The same from the file's text (`path` names it in errors).
ResultsFile parse_results(std::string_view text, const std::string& path,
                          const std::function<bool(std::uint64_t)>& keep_line = {});

// One results.jsonl line (no newline) for a scored plan.
std::string result_line(const strategies::ScoredOutcome& o);

// What `strata explore` and `strata merge` print: counts, rejections per
// rule, the top plans and the Pareto front (table, csv) or the summary with a
// `run` object (json). `report` may be null (merge).
std::string render_explore(const std::string& summary_json, const ExploreReport* report, Format f);

}  // namespace strata::report
