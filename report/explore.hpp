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
//   DIR/manifest.json  what the directory holds plans of (manifest_text);
//   DIR/strata.lock    held (flock) while explore or merge writes the directory;
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

#include <nlohmann/json_fwd.hpp>

#include "report/progress.hpp"
#include "strategies/space.hpp"
#include "report/format.hpp"
#include "explorer/explore.hpp"

namespace strata::report {

// A record's `plan.offload.weights` as the tables show it: "" (not
// offloaded), "weights" (true or "cpu"), "weights:nvme".
template <class Json>
std::string weights_offload_of(const Json& offload) {
  if (!offload.contains("weights")) return "";
  const auto& w = offload.at("weights");
  if (w.is_boolean()) return w.template get<bool>() ? "weights" : "";
  if (!w.is_string()) return "";
  const std::string where = w.template get<std::string>();
  return where == "none" ? "" : where == "cpu" ? "weights" : "weights:" + where;
}

// The value of a searched axis in a record, as the tables print it:
// "interleaved:3" for a schedule with virtual stages, the composite offload
// from its keys (none, activations, weights, optimizer: state and step on
// the CPU; a plan combining them shows each), a key canonical_json leaves
// out at its default as that default, booleans as yes/no, "-" for a key the
// plan does not have.
template <class Json>
std::string axis_cell(const Json& rec, const std::string& axis) {
  const Json& p = rec.at("plan");
  if (axis == "schedule") {
    std::string s = p.at("schedule").template get<std::string>();
    if (p.contains("virtual_stages") && p.at("virtual_stages").template get<std::int64_t>() > 1)
      s += ":" + std::to_string(p.at("virtual_stages").template get<std::int64_t>());
    return s;
  }
  if (axis == "offload" && p.contains("offload") && p.at("offload").is_object()) {
    const Json& o = p.at("offload");
    const bool act = o.value("activations", false);
    const std::string weights = weights_offload_of(o);
    const std::string opt = o.value("optimizer", std::string("none"));
    const int on = int{act} + int{!weights.empty()} + int{opt != "none"};
    if (on == 0) return "none";
    if (on == 1 && opt == "cpu") return "optimizer";
    std::string out;
    auto add = [&](const std::string& x) { out += (out.empty() ? "" : "+") + x; };
    if (act) add("activations");
    if (!weights.empty()) add(weights);
    if (opt != "none") add("optimizer:" + opt);
    return out;
  }
  const Json* v = &p;
  std::string rest = axis;
  if (axis.rfind("batch.", 0) == 0) {
    v = &rec.at("batch");
    rest = axis.substr(6);
  }
  std::size_t from = 0;
  for (std::size_t dot; (dot = rest.find('.', from)) != std::string::npos; from = dot + 1) {
    const std::string k = rest.substr(from, dot - from);
    if (!v->is_object() || !v->contains(k)) return "-";
    v = &v->at(k);
  }
  const std::string k = rest.substr(from);
  if (!v->is_object() || !v->contains(k)) {
    // A key canonical_json writes only where it is not the default.
    if (const auto dflt = strategies::omitted_default(axis)) return std::string(*dflt);
    return "-";
  }
  const Json& x = v->at(k);
  if (x.is_string()) return x.template get<std::string>();
  if (x.is_boolean()) return x.template get<bool>() ? "yes" : "no";
  return x.dump();
}

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

// What a directory's records must be to count (resume, merge, report): the
// plans of `scenario`'s space whose index % shard_count is one of
// `shard_indices`, and valid there. Without a check only each record's
// plan_id is checked (against its own batch and plan).
struct RecordCheck {
  const strategies::Scenario* scenario = nullptr;
  std::uint64_t shard_count = 1;
  std::vector<std::uint64_t> shard_indices{0};
};

// The records of a results.jsonl by plan id, read line by line (memory
// grows with the records' figures, not with the file). A last line without
// its newline (a run killed mid-write) is ignored; `valid_bytes` is where it
// starts. A malformed line elsewhere, one plan id with two different
// records, a plan_id that is not FNV-1a 64 of the record's own {batch,
// plan}, and, with a check, a record outside the space or the shards, or of
// a plan no explore keeps (it breaks a validity rule), is an InputError
// naming the line: such a record was not written by the explore it claims
// to come from, so the directory is refused rather than some records
// silently dropped.
struct ResultsFile {
  std::unordered_map<std::uint64_t, strategies::ScoredPlan> plans;
  std::unordered_map<std::uint64_t, std::string> lines;  // those keep_line asked for
  std::unordered_map<std::uint64_t, std::uint64_t> line_numbers;  // of `lines`, from 1
  std::unordered_set<std::uint64_t> inexact;  // records with "exact": false (folded figures)
  // The first record read of each equivalence class (its figures are the class's).
  std::unordered_map<std::uint64_t, strategies::ScoredPlan> class_figures;
  std::uint64_t valid_bytes = 0;
  std::uint64_t torn_bytes = 0;
  std::uint64_t lines_read = 0;  // whole non-empty lines
};
// A whole record read: its plan id, its line and the line parsed (once,
// for every reader: callers take what they need from it).
using RecordFn = std::function<void(std::uint64_t id, std::string_view line, const nlohmann::json& record)>;
// `on_line`, when given, is called with every whole record, in file order;
// `progress` with the bytes read of the file's, every thousand records.
ResultsFile read_results(const std::string& path,
                         const std::function<bool(std::uint64_t)>& keep_line = {},
                         const RecordCheck* check = nullptr, const RecordFn& on_line = {},
                         const PhaseProgress& progress = {});
// The same from the file's text (`path` names it in errors).
ResultsFile parse_results(std::string_view text, const std::string& path,
                          const std::function<bool(std::uint64_t)>& keep_line = {},
                          const RecordCheck* check = nullptr);

// DIR/manifest.json (docs/explore.md): what an explore directory holds the
// plans of — Strata's version, the model, the cluster, the space (its
// template plan and axes), the goal and the shards — written before the
// first record, checked on --resume, merge and report.
std::string manifest_text(const strategies::Scenario& sc, std::uint64_t shard_count,
                          const std::vector<std::uint64_t>& shard_indices);
// Throws InputError naming `manifest_path`, the first key where `sc` (with
// `what` naming it: "the scenario") differs from the manifest there, and both
// values. Shards are compared only when `shards` is given.
struct ShardSet {
  std::uint64_t count = 1;
  std::vector<std::uint64_t> indices{0};
};
void check_manifest(const std::string& manifest_path, const strategies::Scenario& sc, const std::string& what,
                    const ShardSet* shards = nullptr);
// The shards a manifest names (InputError when it cannot be read).
ShardSet manifest_shards(const std::string& manifest_path);
// The scenario of DIR/scenario.json (explore's copy), its relative paths
// resolved against the directory of `original` (the scenario's path the
// summary names) when it still exists, else against DIR; nothing without a copy.
std::optional<strategies::Scenario> load_explored_scenario(const std::string& dir, const std::string& original);

// The figures of records re-scored as explore scores their plans (each
// plan explored alone: the coarse level, then per layer where explore
// refines it). For each id of `ids`, its record in `results_path` (and in
// `refined_path` when that file has one) must be the line explore writes
// for it; InputError naming the file and line ("DIR/results.jsonl:12"), the
// first field that differs and both values otherwise. The plans of `sc`'s
// space; run after read_results checked the records against it.
void rescore_records(const strategies::Scenario& sc, const std::string& results_path, const std::string& refined_path,
                     const std::vector<std::uint64_t>& ids, const PhaseProgress& progress = {});
// The plans a summary shows of `plans`: its Pareto front and top `top_k` by `by`, by id, once each.
std::vector<std::uint64_t> shown_plans(const std::vector<strategies::ScoredPlan>& plans, std::size_t top_k,
                                       strategies::RankBy by);
// How many of the records a summary does not show are re-scored beside the
// shown ones (drawn_plans): a forgery of a share f of them goes unseen with
// probability (1 − f)^200 — 1.8 % at f = 2 %, below 0.004 % at 5 % — and
// a few forged records outside the shown plans move no median of the
// report's comparisons by more than their share.
inline constexpr std::size_t kDrawnPlans = 200;
// The shown plans and up to `drawn` others of `plans`, drawn at random
// (seeded by std::random_device, so a forger cannot know which), by id,
// once each: what report, export, merge and resume re-score.
std::vector<std::uint64_t> plans_to_rescore(const std::vector<strategies::ScoredPlan>& plans,
                                            std::vector<std::uint64_t> shown, std::size_t drawn = kDrawnPlans);

// What report, export and run check of an explore directory before they
// trust it: its summary agrees with its manifest, its scenario copy is the
// manifest's, every record is a plan of the space and shards with an id of
// its own batch and plan and consistent figures, and the plans the summary
// shows and a random sample of the others are re-scored (rescore_records,
// plans_to_rescore). A directory of an older strata (no
// manifest) has its records' ids checked only. `on_record`, when given, is
// called with every record read, results.jsonl's first and then
// refined.jsonl's (which replace the coarse ones of their plans).
struct CheckedDir {
  std::optional<strategies::Scenario> explored;  // the scenario copy, when checked against a manifest
  ResultsFile results;
  std::vector<strategies::ScoredPlan> pareto, top;  // recomputed from the records (refined figures)
};
// `verify` false: the records are only read (their ids, figures and
// breakdowns as every read checks them), not placed in the space, ruled or
// re-scored: for the report explore writes of the records it has just
// written itself.
CheckedDir check_explore_dir(const std::string& dir, const RecordFn& on_record, const PhaseProgress& progress = {},
                             bool verify = true);

// Plan `id`'s record in an explore directory, as a report reads it: its
// refined.jsonl line where it has one, else its results.jsonl line.
std::string record_line(const std::string& dir, std::uint64_t id);

// One results.jsonl line (no newline) for a scored plan.
std::string result_line(const strategies::ScoredOutcome& o);

// What `strata explore` and `strata merge` print: counts, rejections per
// rule, the top plans and the Pareto front (table, csv) or the summary with a
// `run` object (json). `report` may be null (merge).
std::string render_explore(const std::string& summary_json, const ExploreReport* report, Format f);

}  // namespace strata::report
