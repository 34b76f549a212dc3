#pragma once
// The explorer: every plan of a scenario's space, rejected by the validity
// rules (counted per rule), pruned by the analytical memory bound (counted
// per pool), the rest scored on a thread pool; keeps the Pareto front of
// (step time, peak memory) and the top plans by throughput. docs/explore.md.
//
// Workers hand each scored plan to a sink as it finishes (results.jsonl is
// written by report/explore.hpp); everything returned is independent of the
// number of jobs and of the order plans finish in.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "strategies/scenario.hpp"
#include "lowering/step_program.hpp"

namespace strata::strategies {

// What a scorer says about one plan that fits in memory.
struct Score {
  StepPrediction step;
  Granularity granularity = Granularity::Layer;
  // The memory timeline of the same replay; absent: the explorer takes the
  // analytical model's (a scorer that replays no memory, in tests).
  std::optional<MemoryEstimate> memory;
  // False when the figures are the chunk level's folded ones (ZeRO-3,
  // offload): the explorer replays such plans per layer if it keeps them.
  bool exact = true;
};
using Scorer = std::function<Score(const Scenario&)>;

// The simulator at layer granularity (predict_step over ModelStepCosts), with
// the scenario's calibration read once.
Scorer simulator_scorer(const Scenario& base);
// The layer-level step program replayed without the engine (the same
// figures, tested): what refines the kept plans the chunk level folded.
Scorer exact_scorer(const Scenario& base);
// The coarse level (coarse.hpp: one task per chunk pass), the explorer's
// default: exact where nothing inside a microbatch needs its own events.
Scorer coarse_scorer(const Scenario& base);

// The memory the explorer prunes a plan with before scoring it: the
// analytical model, with optimal recompute's layer choices timed by `costs`
// (the calibration the scorers use). It must never say "does not fit" of a
// plan whose timeline fits (the step-program sample checks it).
MemoryEstimate pruning_memory(const Scenario& sc, const StepCosts& costs);

// The class of plans that lower to one step program, so score alike: the
// plan's canonical JSON with the settings that cannot act on it dropped —
// the recompute policy, its budget and the offload planner, replaced by the
// layer choices they resolved to (`layers`, with Selective read as All where
// the attention kernel saves no scores), overlap_p2p without pipeline
// stages, and overlap_grad_reduce with nothing reduced (dp = cp = 1). The
// test "equivalent plans score alike" holds the lowering to it.
std::string equivalence_key(const Scenario& sc, const LayerPlan& layers);

// The figures a scored plan is ranked by.
struct ScoredPlan {
  std::uint64_t plan_id = 0;
  double step_time_s = 0;
  Bytes peak_memory_bytes = 0;
  double tokens_per_s_per_gpu = 0;
  // With a goal: steps to it times the step time (+inf: never reached); 0 without.
  double time_to_train_s = 0;
  // Its equivalence class: FNV-1a 64 of equivalence_key (0: unknown, a
  // class of its own). Plans of one class have the same figures.
  std::uint64_t class_id = 0;
  // In top and Pareto lists (one plan per class): how many other scored
  // plans its class holds.
  std::uint64_t equivalent = 0;
  bool operator==(const ScoredPlan&) const = default;
};

// What the top plans are: the highest throughput, or (with a goal) the
// shortest time to train.
enum class RankBy : std::uint8_t { Throughput, TimeToTrain };

// global · seq_len / step time / GPUs (as `strata simulate` reports it).
double tokens_per_s_per_gpu(const Scenario& sc, double step_time_s);

// One plan the scorer finished, as handed to the sink.
struct ScoredOutcome {
  std::uint64_t index = 0;  // in the space
  const Scenario& point;    // the scenario at this plan
  const MemoryEstimate& memory;
  const Score& score;
  ScoredPlan ranked;
  std::string_view canonical = {};  // canonical_json of the plan, when known
  const GoalEstimate* goal = nullptr;  // with a goal: the steps to it
};

// Plans rejected by one rule: the count and the message of the first (lowest
// index) such plan.
struct RuleCount {
  std::uint64_t count = 0;
  std::uint64_t first_index = 0;
  std::string example;  // "plan.tp: 3 does not divide heads=32"
};

// Exploring runs in two phases: every plan of the shard is checked
// (validity, memory bound, already scored), then the plans left are scored,
// the costliest first (microbatches × layers: the size of the step's task
// graph), so no slow plan is left alone at the end.
struct Progress {
  std::uint64_t checked = 0;  // plans of this shard checked
  std::uint64_t total = 0;    // plans of this shard
  std::uint64_t scored = 0;   // of to_score: done (scored, or refused by the scorer)
  std::uint64_t to_score = 0;  // plans to score now, not resumed (known once every plan is checked)
  double cost_done = 0, cost_total = 0;  // of the plans to score, by their cost estimate
  double elapsed_s = 0;
  double scoring_s = 0;  // of elapsed_s: since scoring started
};

// Plans one explore may enumerate unless told otherwise (`--max-plans`):
// checking runs at ~600,000 plans/s on two cores, so this is about a
// minute of checking before any scoring.
inline constexpr std::uint64_t kDefaultMaxPlans = 20'000'000;

struct ExploreOptions {
  int jobs = 0;  // worker threads; 0: the hardware's
  // A shard of more plans than this is refused before any work (InputError).
  std::uint64_t max_plans = kDefaultMaxPlans;
  std::uint64_t shard_index = 0;  // plans with index % shard_count == shard_index
  std::uint64_t shard_count = 1;
  std::size_t top_k = 10;
  // Unset: time to train when the scenario has a goal, else throughput.
  // TimeToTrain without a goal is an InputError.
  std::optional<RankBy> rank_by;
  Scorer scorer;  // empty: coarse_scorer(scenario)
  // Re-scores the plans kept (the Pareto front and the top plans) until
  // every one of them has this scorer's figures. Empty: the kept plans the
  // scorer marked inexact (Score::exact) are re-scored by exact_scorer.
  Scorer refine;
  bool refine_kept = true;
  // Plans already scored (resume): not scored again, ranked with these figures.
  const std::unordered_map<std::uint64_t, ScoredPlan>* finished = nullptr;
  // Of those, the ones whose figures were folded (Score::exact false).
  const std::unordered_set<std::uint64_t>* finished_inexact = nullptr;
  // Called from worker threads, concurrently, for every plan scored now.
  std::function<void(const ScoredOutcome&)> on_scored;
  // Called from worker threads, concurrently, for every plan re-scored by `refine`.
  std::function<void(const ScoredOutcome&)> on_refined;
  // Called from the calling thread about every `progress_interval_s`, and once at the end.
  std::function<void(const Progress&)> on_progress;
  double progress_interval_s = 1.0;
  // Score one plan of each equivalence class (equivalence_key) and give its
  // figures to the rest; false: every plan is scored (a scorer that reads
  // settings the key drops, in tests).
  bool share_equivalent = true;
};

struct ExploreResult {
  std::uint64_t space_size = 0;
  std::uint64_t enumerated = 0;  // plans of this shard
  std::uint64_t invalid = 0;     // broke a validity rule
  std::uint64_t pruned = 0;      // do not fit (analytical memory bound)
  std::uint64_t not_modelled = 0;  // the memory model or the scorer refused (InputError)
  std::uint64_t failed = 0;      // the scorer failed otherwise (internal error)
  std::uint64_t scored = 0;      // scored now or earlier (resumed)
  std::uint64_t resumed = 0;     // of scored: read from an earlier run
  // Equivalence classes scored now (each scored once; share_equivalent).
  std::uint64_t scored_classes = 0;
  std::map<std::string, RuleCount> rejected;  // by rule (not-modelled and internal-error too)
  std::map<std::string, RuleCount> pruned_by_pool;  // "gpu", "host", "nvme"
  std::vector<ScoredPlan> plans;   // every scored plan, by plan id (refined figures where refined)
  std::vector<ScoredPlan> pareto;  // by step time, then memory, then id
  std::vector<ScoredPlan> top;     // by rank_by, then id
  RankBy rank_by = RankBy::Throughput;
  std::vector<ScoredPlan> refined;  // plans re-scored by `refine`, by plan id
  std::uint64_t refine_rounds = 0;
  double wall_s = 0;
  double scoring_s = 0;  // of wall_s: scoring the plans left after the checks
  double refine_s = 0;   // of wall_s: re-scoring the kept plans
  int jobs = 0;  // worker threads used
};

ExploreResult explore(const Scenario& sc, const ExploreOptions& options);

// Throws InputError (the scenario's file, path "space") when the shard of
// the space `options` asks for holds more than options.max_plans plans,
// saying how many and how to narrow it. explore() calls it first.
void check_plan_limit(const Scenario& sc, const ExploreOptions& options);

// One plan per equivalence class (class_id; 0 is a class of its own): the
// lowest id, its `equivalent` the count of the others, whatever order the
// plans were scored, resumed or merged in.
std::vector<ScoredPlan> one_per_class(std::vector<ScoredPlan> plans);
// Of one_per_class(plans), those no other beats in both step time and peak
// memory (ties in both are all kept), by step time, then memory, then id.
std::vector<ScoredPlan> pareto_front(std::vector<ScoredPlan> plans);
// Of one_per_class(plans), the `k` best by throughput (tokens/s per GPU,
// descending) or by time to train (ascending; unreachable last); ties by id.
std::vector<ScoredPlan> top_plans(std::vector<ScoredPlan> plans, std::size_t k, RankBy by);
// rank_by as given, or from the scenario: time to train with a goal.
RankBy resolve_rank_by(const Scenario& sc, std::optional<RankBy> rank_by);
// Adds `b`'s counts to `a` keeping the lowest-index example.
void merge_rule_counts(std::map<std::string, RuleCount>& a,
                       const std::map<std::string, RuleCount>& b);

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::RankBy> {
  static constexpr std::array<std::pair<strategies::RankBy, std::string_view>, 2> table{
      {{strategies::RankBy::Throughput, "throughput"},
       {strategies::RankBy::TimeToTrain, "time_to_train"}}};
};
}  // namespace strata
