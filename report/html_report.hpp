#pragma once
// `strata report DIR` (docs/report.md): comparison reports of an explore
// output directory.
//   report.html  one self-contained file (inline CSS, inline SVG charts, a
//                small inline script that sorts tables; nothing fetched);
//   report.md    the same content as Markdown tables and sentences;
//   results.csv  one row per scored plan, flat columns.
// Rendering is a pure function of ReportData, so the same directory gives
// the same bytes; every string taken from input is escaped for its format.
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "report/progress.hpp"
#include "sim/engine.hpp"
#include "sim/task_graph.hpp"
#include "sim/units.hpp"
#include "explorer/tradeoff.hpp"

namespace strata::report {

// The parts of time_breakdown_s, in order: `key` names the CSV column
// (`time_<key>_s`), `label` the chart legend.
struct TimePart {
  const char* key;
  const char* label;
};
inline constexpr TimePart kTimeParts[] = {
    {"compute", "compute"},           {"recompute", "recompute"},
    {"exposed_comm_dp", "exposed dp comm"}, {"exposed_comm_tp", "exposed tp comm"},
    {"exposed_comm_pp", "exposed pp comm"}, {"exposed_comm_cp", "exposed cp comm"},
    {"exposed_comm_ep", "exposed ep comm"}, {"exposed_comm_offload", "exposed offload copies"},
    {"bubble", "pipeline bubble"},    {"offload_stall", "offload stall"},
    {"optimizer", "optimizer"}};
inline constexpr std::size_t kTimePartCount = std::size(kTimeParts);

// One scored plan of results.jsonl, flattened.
struct PlanRecord {
  std::string plan_id;  // 16 hex digits
  std::string class_id;  // its equivalence class (16 hex digits; empty: a class of its own)
  std::int64_t batch_global = 0, batch_micro = 0;
  std::int64_t dp = 1, tp = 1, pp = 1;
  std::vector<std::string> axes;  // the value of each ReportData::axes entry ("1f1b", "yes", "4")
  double step_time_s = 0, tokens_per_s_per_gpu = 0, mfu = 0;
  Bytes peak_memory_bytes = 0, gpu_memory_bytes = 0;
  // What must fit the GPU: the tensors and the CUDA context, without the
  // allocator's reserve (docs/memory-model.md, "Fits"); records written
  // before it was recorded give their peak.
  Bytes required_memory_bytes = 0;
  std::vector<Bytes> memory;   // per ReportData::memory_tags
  std::vector<double> time_s;  // per kTimeParts
  double bubble_fraction = 0;
  // With a goal (ReportData::goal): the steps to it and the time they take
  // (unset: never reached), the penalty and batch behind the steps.
  std::optional<double> time_to_train_s;
  std::optional<std::int64_t> train_steps;
  double penalty = 1, batch_tokens = 0;
  bool fits() const { return gpu_memory_bytes <= 0 || required_memory_bytes <= gpu_memory_bytes; }
};

// An axis of the space, with the values it lists (as the summary writes them).
struct SpaceAxis {
  std::string name;
  std::vector<std::string> values;
};

// A line of the explorer's counts ("rejected (invalid)", a rule, …).
struct CountRow {
  std::string name;
  std::uint64_t count = 0;
  std::string example;
  bool sub = false;  // a rule or pool under the line above
};

// The best plan's step, replayed, as lanes of busy spans per pipeline stage.
enum class SpanKind : int { Forward, Backward, Recompute, Comm, Copy, Optimizer, Other };
inline constexpr const char* kSpanKindNames[] = {"forward", "backward", "recompute", "communication",
                                                 "offload copy", "optimizer", "other"};
inline constexpr std::size_t kSpanKinds = std::size(kSpanKindNames);

struct TimelineSpan {
  std::int64_t start_ns = 0, end_ns = 0;
  SpanKind kind = SpanKind::Other;
  std::uint32_t tasks = 0;
};
struct TimelineLane {
  int stage = 0;
  std::string name;  // compute, comm, p2p, copies, cpu
  std::vector<TimelineSpan> spans;
  std::int64_t busy_ns = 0;  // union of its tasks' intervals
  std::uint64_t tasks = 0;
};
struct Timeline {
  std::string plan_id;
  std::int64_t step_ns = 0;
  int stages = 0;                  // pipeline stages of the plan
  std::vector<TimelineLane> lanes;  // the stages shown (at most 16), lane by lane
  // On a cluster of node groups, the GPUs each stage runs on (by stage);
  // empty otherwise.
  std::vector<std::string> stage_gpus;
  std::uint64_t tasks = 0;
  bool aggregated = false;  // spans merged over time columns (very many tasks)
};

// Lanes of the replay of a lowered step, by the role of each task's first
// queue (sim::Role, set by lowering/step_program.cpp): its stage (none: the
// task's) and lane (the copy engines share one; a queue of no lane has one
// of its own, by name). Same-kind tasks that touch merge into one span;
// when a lane would still hold more than `columns` / 2 spans, its time is cut
// into `columns` columns and each busy column takes the kind that fills most
// of it (runs of one kind merge). At most `max_stages` stages are kept,
// evenly spaced, first and last included.
Timeline make_timeline(const sim::TaskGraph& graph, const sim::RunResult& run,
                       const std::string& plan_id, std::size_t columns = 1200,
                       int max_stages = 16);

struct ReportData {
  std::string dir;  // the explore directory (shown, escaped)
  std::string scenario, model, gpu;
  std::string throughput_unit = "tokens";  // "samples" for a layer chain
  std::string cluster_gpus;  // a cluster of node groups: its GPUs (ClusterSpec::gpus_text); else empty
  std::int64_t gpus = 0;
  std::uint64_t space_size = 0;
  std::vector<SpaceAxis> axes;  // every axis the summary lists, in its order
  std::vector<std::string> memory_tags;
  std::vector<CountRow> counts;
  std::vector<PlanRecord> plans;  // any order; renderers rank them
  std::optional<Timeline> timeline;
  std::string timeline_note;  // why there is no timeline, when there is none
  // The best plan's step time against memory per recompute policy
  // (strategies::plan_tradeoff), and why there is none when there is none.
  std::optional<strategies::Tradeoff> tradeoff;
  std::string tradeoff_note;
  // The training goal the records carry ("target loss 2.5", "3e+11 tokens");
  // empty without one. B_noise: the critical batch of a loss goal.
  std::string goal;
  std::optional<double> b_noise_tokens;
};

// What the report concludes; shared by the HTML and Markdown renderings.
struct AxisValueStats {
  std::string value;
  std::size_t plans = 0;
  std::optional<std::size_t> best;  // index into plans: highest throughput
  double median_step_s = 0;
  double median_peak_bytes = 0;
};
struct AxisComparison {
  std::string axis;
  std::vector<AxisValueStats> values;
  // Pairs of plans that differ in this axis only, against the axis's first
  // value: per other value, the pairs and the median ratios (other / first).
  struct Paired {
    std::string value;
    std::size_t pairs = 0;
    // Pairs left out: both plans of one equivalence class (the axis cannot
    // act on them; their ratios would be 1 and say nothing of it).
    std::size_t inert = 0;
    double step_ratio = 1, peak_ratio = 1;
  };
  std::vector<Paired> paired;
  std::string sentence;
};
struct ReportAnalysis {
  std::vector<std::size_t> ranked;  // plans by throughput (then step time, plan id)
  std::vector<std::size_t> fitting;  // ranked, only those that fit
  std::vector<std::size_t> front;    // Pareto front of (step time, peak memory), by step time
  std::optional<std::size_t> winner, runner_up, lowest_memory;
  std::vector<std::string> why;  // sentences: the winner and what the others trade
  std::vector<AxisComparison> axes;  // axes with more than one value
  std::vector<std::size_t> shown;    // plans in the breakdown charts
  std::optional<std::size_t> colour_axis;  // axis colouring the scatter
  // With a goal: the plans that fit by time to train (never reached last,
  // then throughput, plan id) and sentences comparing the two rankings.
  std::vector<std::size_t> by_time_to_train;
  std::vector<std::string> ranking_why;
  std::optional<std::size_t> ranking_axis;  // colours the step time against time to train chart
};
ReportAnalysis analyse(const ReportData& d);

// Each renders `an`, analyse(d) (analysed once for all three by a caller
// that writes them together), or analyses d itself.
std::string report_html(const ReportData& d, const ReportAnalysis& an);
std::string report_markdown(const ReportData& d, const ReportAnalysis& an);
std::string results_csv(const ReportData& d, const ReportAnalysis& an);
inline std::string report_html(const ReportData& d) { return report_html(d, analyse(d)); }
inline std::string report_markdown(const ReportData& d) { return report_markdown(d, analyse(d)); }
inline std::string results_csv(const ReportData& d) { return results_csv(d, analyse(d)); }

// Reads DIR/summary.json and DIR/results.jsonl (report/explore.hpp) and
// re-simulates the best plan from DIR/scenario.json (or, failing that, the
// scenario path the summary names) for its timeline and its recompute
// trade-off (12 budgets). Throws InputError
// naming the file for a directory that is not an explore output.
// `progress` follows the checks (explore.hpp's PhaseProgress) and the best
// plan's re-simulation and trade-off search.
// `verify` false: for explore's own report of what it has just written
// (check_explore_dir's `verify`).
// `analysis`, when given, receives analyse() of the data returned.
ReportData load_report_data(const std::string& dir, const PhaseProgress& progress = {}, bool verify = true,
                            ReportAnalysis* analysis = nullptr);

// load_report_data, then report.html, report.md and results.csv written
// atomically into `out_dir` (made when missing). Nothing is written when
// reading fails. `dir` is locked while it is read (DirLock when `out_dir` is
// `dir`, else DirReadLock): one an explore or merge holds is an InputError
// naming the holder. Returns the lines `strata report` prints.
std::string write_report(const std::string& dir, const std::string& out_dir, const PhaseProgress& progress = {},
                         bool verify = true);

}  // namespace strata::report
