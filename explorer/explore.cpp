#include "explorer/explore.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "lowering/coarse.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/schedule.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_layout.hpp"
#include "strategies/stage_split.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {

namespace {

void count_rule(std::map<std::string, RuleCount>& m, const std::string& rule, std::uint64_t index,
                const std::string& example) {
  auto [it, fresh] = m.try_emplace(rule);
  RuleCount& rc = it->second;
  if (fresh || index < rc.first_index) {
    rc.first_index = index;
    rc.example = example;
  }
  ++rc.count;
}

// One worker's share of the counts.
struct Tally {
  std::uint64_t invalid = 0, pruned = 0, not_modelled = 0, failed = 0, scored = 0, resumed = 0;
  std::map<std::string, RuleCount> rejected, pruned_by_pool;
  std::vector<ScoredPlan> plans;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> feasible;  // (plan id, index in the space)
  std::vector<std::uint64_t> inexact;  // plan ids whose figures a refinement makes exact
};

std::string gib(Bytes b) {
  const double g = static_cast<double>(b) / static_cast<double>(kGiB);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", g);
  return buf;
}

// A plan memory pruned: counted under its pool, with the first plan's figures.
void count_pruned(std::map<std::string, RuleCount>& by_pool, const Infeasible& why, std::uint64_t index) {
  count_rule(by_pool, why.pool, index,
             why.pool + " memory: needs " + gib(why.needs) + " GiB, has " + gib(why.has) + " GiB");
}

}  // namespace

namespace {
std::shared_ptr<const cost::Calibration> calibration_once(const Scenario& base) {
  const cost::Calibration dflt = cost::default_calibration(base.cluster.gpu);
  return std::make_shared<const cost::Calibration>(
      base.calibration ? cost::load_calibration_file(*base.calibration, dflt) : dflt);
}
}  // namespace

namespace {
// Program workspaces for a scorer that several threads call: each call
// borrows one (its vectors keep their capacity from plan to plan).
class WorkspacePool {
 public:
  class Lease {
   public:
    Lease(WorkspacePool& pool, std::unique_ptr<ProgramWorkspace> w) : pool_(pool), w_(std::move(w)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_.put(std::move(w_)); }
    ProgramWorkspace* get() const { return w_.get(); }

   private:
    WorkspacePool& pool_;
    std::unique_ptr<ProgramWorkspace> w_;
  };
  Lease lease() {
    std::unique_ptr<ProgramWorkspace> w;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        w = std::move(free_.back());
        free_.pop_back();
      }
    }
    return {*this, w ? std::move(w) : std::make_unique<ProgramWorkspace>()};
  }

 private:
  void put(std::unique_ptr<ProgramWorkspace> w) {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(w));
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<ProgramWorkspace>> free_;
};
}  // namespace

Scorer exact_scorer(const Scenario& base) {
  return [cal = calibration_once(base), pool = std::make_shared<WorkspacePool>()](const Scenario& sc) {
    const ModelStepCosts costs(sc, *cal);
    const auto w = pool->lease();
    ChunkPrediction pr = predict_replayed(sc, costs, {.every_stage = false, .workspace = w.get()});
    return Score{std::move(pr.step), Granularity::Layer, std::move(pr.memory), true};
  };
}

Scorer simulator_scorer(const Scenario& base) {
  return [cal = calibration_once(base)](const Scenario& sc) {
    const ModelStepCosts costs(sc, *cal);
    sim::RunResult run;
    LoweredStep low;
    StepPrediction step = predict_step(sc, costs, &run, &low);
    return Score{std::move(step), Granularity::Layer, memory_from_run(sc, low, run)};
  };
}

namespace {
// Pipeline schedules by (kind, stages, virtual stages, microbatches), shared
// by the plans of a sweep that run the same one; emptied when it holds many.
class ScheduleCache {
 public:
  std::shared_ptr<const PipelineSchedule> get(const Plan& p, int m) {
    const std::array<std::int64_t, 4> key{static_cast<std::int64_t>(p.schedule), p.pp,
                                          p.virtual_stages, m};
    {
      std::lock_guard lock(mu_);
      if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    auto s = std::make_shared<const PipelineSchedule>(make_schedule(
        p.schedule, static_cast<int>(p.pp), static_cast<int>(p.virtual_stages), m));
    std::lock_guard lock(mu_);
    if (cache_.size() >= 256) cache_.clear();
    cache_.emplace(key, s);
    return s;
  }

 private:
  std::mutex mu_;
  std::map<std::array<std::int64_t, 4>, std::shared_ptr<const PipelineSchedule>> cache_;
};
}  // namespace

Scorer coarse_scorer(const Scenario& base) {
  return [cal = calibration_once(base), schedules = std::make_shared<ScheduleCache>(),
          pool = std::make_shared<WorkspacePool>()](const Scenario& sc) {
    const ModelStepCosts costs(sc, *cal);
    const auto sched =
        schedules->get(sc.plan, static_cast<int>(microbatches(sc.plan, sc.batch)));
    const auto w = pool->lease();
    ChunkPrediction pr =
        predict_chunks(sc, costs, {.schedule = sched.get(), .every_stage = false, .workspace = w.get()});
    return Score{std::move(pr.step), Granularity::Chunk, std::move(pr.memory), pr.exact};
  };
}

MemoryEstimate pruning_memory(const Scenario& sc, const StepCosts& costs) {
  if (!needs_solver(sc.plan)) return estimate_memory(sc);
  return estimate_memory(sc, {}, plan_layers(sc, costs));
}

std::string equivalence_key(const Scenario& sc, const LayerPlan& layers) {
  Plan p = sc.plan;
  p.recompute = Recompute::None;
  p.recompute_k = 1;
  p.memory_budget_GiB.reset();
  p.offload.planner = OffloadPlanner::All;
  if (p.pp == 1) p.implementation.overlap_p2p = false;
  if (p.dp == 1 && p.cp == 1) p.implementation.overlap_grad_reduce = false;
  // ZeRO-3 reduces each layer as its backward ends, and a compressed
  // exchange runs after the backward: either way the flag orders no bucket.
  const bool compressed = p.dp > 1 && p.compression.method != CompressionMethod::None;
  if ((p.zero >= 3 && zero_shards(p) > 1) || compressed) p.implementation.overlap_grad_reduce = false;
  // Without ZeRO, or with one rank to shard over, there is no gather to overlap.
  if (zero_shards(p) == 1 || p.zero == 0) p.implementation.overlap_param_gather = false;
  // A layout that splits the blocks as the balanced one does (one chunk, or
  // a remainder that lands alike) is the balanced plan; a layout weighed by
  // the GPUs is the split it resolved to (gpu_speed and gpu_memory often
  // agree).
  if (p.pipeline_layout != PipelineLayout::Balanced && (p.stage_layers.empty() || weighs_stages(p.pipeline_layout))) {
    Plan balanced = p;
    balanced.pipeline_layout = PipelineLayout::Balanced;
    balanced.stage_layers.clear();
    if (chunk_layers(p, sc.model.layers) == chunk_layers(balanced, sc.model.layers)) p = balanced;
    else if (weighs_stages(p.pipeline_layout)) p.pipeline_layout = PipelineLayout::Balanced;
  }
  std::string key = canonical_json(p, sc.batch);
  std::string keeps = keeps_pattern(layers.keeps);
  if (keeps.find('S') != std::string::npos && !sc.model.chain) {
    const std::vector<ActivationRule> rules =
        ActivationRule::of(cost::expand(sc.model, expand_options(sc)), selective_policy(sc.plan));
    if (std::all_of(rules.begin(), rules.end(),
                    [](const ActivationRule& r) { return r.full == r.selective && !r.selective_reruns; }))
      std::replace(keeps.begin(), keeps.end(), 'S', 'A');
    // Layers kept selectively under torchtitan's op policy, or Megatron-Core's
    // other recompute modules, are not the attention core's: another plan.
    else if (selective_policy(sc.plan) == Recompute::SelectiveOp) key += "|op";
    else if (const auto mods = recompute_modules_of(sc.plan); mods != cost::kDefaultRecomputeModules)
      key += "|modules " + cost::module_list(mods);
  }
  key += '|';
  key += keeps;
  key += '|';
  key += swaps_pattern(layers.swaps);
  return key;
}

namespace {
ScoredPlan ranked_figures(const Scenario& sc, std::uint64_t id, double step_s,
                          const MemoryEstimate& mem, const std::optional<GoalEstimate>& goal) {
  ScoredPlan p{id, step_s, mem.peak_bytes, tokens_per_s_per_gpu(sc, step_s), 0};
  if (goal) {
    const auto t = time_to_train(sc, *goal, step_s);
    p.time_to_train_s = t ? t->seconds : std::numeric_limits<double>::infinity();
  }
  return p;
}
}  // namespace

double tokens_per_s_per_gpu(const Scenario& sc, double step_time_s) {
  if (step_time_s <= 0) return 0;
  const double gpus = static_cast<double>(sc.cluster.gpus());
  const double tokens =
      static_cast<double>(sc.batch.global) * static_cast<double>(sc.model.tokens_per_sample());
  return tokens / step_time_s / gpus;
}

std::vector<ScoredPlan> one_per_class(std::vector<ScoredPlan> plans) {
  std::sort(plans.begin(), plans.end(), [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  std::unordered_map<std::uint64_t, std::size_t> first;  // class → its plan in `out`
  std::vector<ScoredPlan> out;
  out.reserve(plans.size());
  for (ScoredPlan& p : plans) {
    if (p.class_id != 0) {
      const auto [it, fresh] = first.try_emplace(p.class_id, out.size());
      if (!fresh) {
        ++out[it->second].equivalent;
        continue;
      }
    }
    p.equivalent = 0;
    out.push_back(p);
  }
  return out;
}

std::vector<ScoredPlan> pareto_front(std::vector<ScoredPlan> plans) {
  plans = one_per_class(std::move(plans));
  std::sort(plans.begin(), plans.end(), [](const ScoredPlan& a, const ScoredPlan& b) {
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    if (a.peak_memory_bytes != b.peak_memory_bytes) return a.peak_memory_bytes < b.peak_memory_bytes;
    return a.plan_id < b.plan_id;
  });
  std::vector<ScoredPlan> front;
  // Lowest memory among plans strictly faster than the current group.
  Bytes faster_min = std::numeric_limits<Bytes>::max();
  for (std::size_t i = 0; i < plans.size();) {
    std::size_t j = i;
    while (j < plans.size() && plans[j].step_time_s == plans[i].step_time_s) ++j;
    // Within a group of equal time, only the lowest memory (and its ties) survive.
    const Bytes group_min = plans[i].peak_memory_bytes;
    for (std::size_t k = i; k < j; ++k)
      if (plans[k].peak_memory_bytes == group_min && group_min < faster_min)
        front.push_back(plans[k]);
    faster_min = std::min(faster_min, group_min);
    i = j;
  }
  return front;
}

std::vector<ScoredPlan> top_plans(std::vector<ScoredPlan> plans, std::size_t k, RankBy by) {
  auto better = [by](const ScoredPlan& a, const ScoredPlan& b) {
    if (by == RankBy::TimeToTrain && a.time_to_train_s != b.time_to_train_s)
      return a.time_to_train_s < b.time_to_train_s;
    if (by == RankBy::Throughput && a.tokens_per_s_per_gpu != b.tokens_per_s_per_gpu)
      return a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu;
    return a.plan_id < b.plan_id;
  };
  plans = one_per_class(std::move(plans));
  k = std::min(k, plans.size());
  std::partial_sort(plans.begin(), plans.begin() + static_cast<std::ptrdiff_t>(k), plans.end(),
                    better);
  plans.resize(k);
  return plans;
}

RankBy resolve_rank_by(const Scenario& sc, std::optional<RankBy> rank_by) {
  if (!rank_by) return sc.goal ? RankBy::TimeToTrain : RankBy::Throughput;
  if (*rank_by == RankBy::TimeToTrain && !sc.goal)
    throw InputError(sc.file, "goal",
                     "ranking by time to train needs a goal ({\"tokens\": N} or {\"target_loss\": x})");
  return *rank_by;
}

void merge_rule_counts(std::map<std::string, RuleCount>& a,
                       const std::map<std::string, RuleCount>& b) {
  for (const auto& [rule, rc] : b) {
    auto [it, fresh] = a.try_emplace(rule, rc);
    if (fresh) continue;
    it->second.count += rc.count;
    if (rc.first_index < it->second.first_index) {
      it->second.first_index = rc.first_index;
      it->second.example = rc.example;
    }
  }
}

namespace {
std::uint64_t shard_size(std::uint64_t space_size, const ExploreOptions& opt) {
  return space_size > opt.shard_index
             ? (space_size - opt.shard_index + opt.shard_count - 1) / opt.shard_count
             : 0;
}
}  // namespace

void check_plan_limit(const Scenario& sc, const ExploreOptions& opt) {
  if (opt.shard_count < 1 || opt.shard_index >= opt.shard_count)
    throw Error("explore: shard index must be below the shard count");
  const std::uint64_t size = sc.space ? sc.space->size() : 1;
  const std::uint64_t n = shard_size(size, opt);
  if (n > opt.max_plans)
    throw InputError(sc.file, "space",
                     "enumerates " + std::to_string(n) + " plans" +
                         (opt.shard_count > 1 ? " in this shard" : "") + ", more than --max-plans " +
                         std::to_string(opt.max_plans) +
                         "; list fewer values for some axes, split the sweep with --shard i/n, "
                         "or raise --max-plans");
}

ExploreResult explore(const Scenario& sc, const ExploreOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  check_plan_limit(sc, opt);
  Space space;
  if (sc.space) space = *sc.space;
  space.gpus = sc.cluster.gpus();

  ExploreResult res;
  res.rank_by = resolve_rank_by(sc, opt.rank_by);
  res.space_size = space.size();
  const std::uint64_t total = shard_size(res.space_size, opt);
  res.enumerated = total;
  const Scorer scorer = opt.scorer ? opt.scorer : coarse_scorer(sc);
  // Optimal recompute's layer choices depend on the layers' times: the
  // memory bound times them with the calibration the scorers use.
  const auto cal = calibration_once(sc);
  const auto memory_of = [&cal](const Scenario& pt) { return pruning_memory(pt, ModelStepCosts(pt, *cal)); };
  int jobs = opt.jobs > 0 ? opt.jobs : static_cast<int>(std::thread::hardware_concurrency());
  jobs = std::max(1, jobs);
  if (static_cast<std::uint64_t>(jobs) > total) jobs = static_cast<int>(std::max<std::uint64_t>(1, total));

  res.jobs = jobs;
  // Phase 1: check every plan; phase 2: score the survivors, costliest first.
  struct Candidate {
    std::uint64_t index;
    std::uint64_t id;       // plan id: the hash of
    std::string canonical;  // canonical_json(plan, batch), kept for its record
    double cost;
    std::string key;        // equivalence_key
    LayerPlan layers;       // its layer choices
    std::optional<Bytes> budget;
  };
  std::atomic<std::uint64_t> next{0}, checked{0}, scored_now{0};
  std::atomic<std::uint64_t> to_score{0};
  std::atomic<bool> stop{false}, scoring{false};
  std::atomic<Clock::rep> scoring_start{0};
  std::mutex err_mu;
  // Costs are whole numbers (microbatches × layers): summed exactly.
  std::atomic<std::uint64_t> cost_done{0};
  double cost_total = 0;
  std::exception_ptr error;
  std::vector<Tally> tallies(static_cast<std::size_t>(jobs));
  std::vector<std::vector<Candidate>> found(static_cast<std::size_t>(jobs));
  std::vector<Candidate> candidates;

  auto fail = [&] {
    std::lock_guard lock(err_mu);
    if (!error) error = std::current_exception();
    stop = true;
  };
  auto not_modelled = [](Tally& t, std::uint64_t index, const InputError& e) {
    ++t.not_modelled;
    count_rule(t.rejected, "not-modelled", index, e.path() + ": " + e.rule());
  };

  auto check = [&](Tally& t, std::vector<Candidate>& out) {
    Scenario pt = sc;
    pt.space.reset();
    constexpr std::uint64_t kChunk = 64;
    try {
      while (!stop.load(std::memory_order_relaxed)) {
        const std::uint64_t begin = next.fetch_add(kChunk);
        if (begin >= total) break;
        const std::uint64_t end = std::min(total, begin + kChunk);
        for (std::uint64_t j = begin; j < end; ++j, checked.fetch_add(1, std::memory_order_relaxed)) {
          const std::uint64_t index = opt.shard_index + j * opt.shard_count;
          space_point(sc, space, index, pt.plan, pt.batch);
          if (auto v = first_violation(pt)) {
            ++t.invalid;
            count_rule(t.rejected, v->rule, index, v->path + ": " + v->message);
            continue;
          }
          MemoryEstimate mem;
          try {
            mem = memory_of(pt);
          } catch (const InputError& e) {
            not_modelled(t, index, e);
            continue;
          }
          if (!mem.feasible()) {
            ++t.pruned;
            count_pruned(t.pruned_by_pool, *mem.infeasible, index);
            continue;
          }
          std::string canonical = canonical_json(pt.plan, pt.batch);
          const std::uint64_t id = fnv1a64(canonical);
          t.feasible.push_back({id, index});
          if (opt.finished) {
            const auto it = opt.finished->find(id);
            if (it != opt.finished->end()) {
              t.plans.push_back(it->second);
              ++t.scored;
              ++t.resumed;
              if (opt.finished_inexact && opt.finished_inexact->count(id)) t.inexact.push_back(id);
              continue;
            }
          }
          // The step's task graph grows with microbatches × layers.
          const double cost = static_cast<double>(microbatches(pt.plan, pt.batch) + 1) *
                              static_cast<double>(sc.model.layers);
          std::string key = equivalence_key(pt, mem.layers);
          out.push_back({index, id, std::move(canonical), cost, std::move(key), std::move(mem.layers), mem.budget});
        }
      }
    } catch (...) {
      fail();
    }
  };

  // Candidates by equivalence class (equivalence_key), in the scoring order
  // of their first member; one class per candidate without share_equivalent.
  std::vector<std::vector<std::size_t>> groups;
  auto score = [&](Tally& t) {
    Scenario pt = sc;
    pt.space.reset();
    try {
      while (!stop.load(std::memory_order_relaxed)) {
        const std::uint64_t k = next.fetch_add(1);
        if (k >= groups.size()) break;
        // The first member's score, given to the rest with their own layer
        // choices and budget (the figures are equal: equivalence_key).
        std::optional<Score> shared;
        for (const std::size_t member : groups[static_cast<std::size_t>(k)]) {
        const Candidate& c = candidates[member];
        space_point(sc, space, c.index, pt.plan, pt.batch);
        Score sc_;
        bool ok = false;
        if (shared) {
          sc_ = *shared;
          if (sc_.memory) {
            sc_.memory->layers = c.layers;
            sc_.memory->budget = c.budget;
          }
          ok = true;
        } else {
          try {
            sc_ = scorer(pt);
            ok = true;
            if (groups[static_cast<std::size_t>(k)].size() > 1) shared = sc_;
          } catch (const InputError& e) {
            not_modelled(t, c.index, e);
          } catch (const std::exception& e) {
            ++t.failed;
            count_rule(t.rejected, "internal-error", c.index, e.what());
          }
        }
        // The replayed timeline where the scorer gives one: the analytical
        // bound that let the plan through can be below it (offloaded bytes
        // leave only when their copy ends).
        const MemoryEstimate mem = ok && sc_.memory ? *sc_.memory : memory_of(pt);
        if (ok && !mem.feasible()) {
          ok = false;
          ++t.pruned;
          count_pruned(t.pruned_by_pool, *mem.infeasible, c.index);
        }
        std::optional<GoalEstimate> goal;
        if (ok) {
          try {
            goal = estimate_goal(pt);
          } catch (const InputError& e) {
            ok = false;
            not_modelled(t, c.index, e);
          }
        }
        if (ok) {
          const double step_s = to_seconds(sc_.step.step_time);
          ScoredPlan ranked = ranked_figures(pt, c.id, step_s, mem, goal);
          ranked.class_id = fnv1a64(c.key);
          if (opt.on_scored)
            opt.on_scored(ScoredOutcome{c.index, pt, mem, sc_, ranked, c.canonical, goal ? &*goal : nullptr});
          t.plans.push_back(ranked);
          if (!sc_.exact) t.inexact.push_back(c.id);
          ++t.scored;
        }
        scored_now.fetch_add(1, std::memory_order_relaxed);
        cost_done.fetch_add(static_cast<std::uint64_t>(c.cost), std::memory_order_relaxed);
        }
      }
    } catch (...) {
      fail();
    }
  };

  auto progress = [&] {
    if (!opt.on_progress) return;
    Progress p;
    p.checked = checked.load();
    p.total = total;
    p.scored = scored_now.load();
    p.to_score = to_score.load();
    p.cost_done = static_cast<double>(cost_done.load());
    p.cost_total = cost_total;
    const auto now = Clock::now();
    p.elapsed_s = std::chrono::duration<double>(now - t0).count();
    if (scoring.load())
      p.scoring_s = std::chrono::duration<double>(
                        now - Clock::time_point(Clock::duration(scoring_start.load())))
                        .count();
    opt.on_progress(p);
  };

  // Runs `body` on `jobs` threads, reporting progress from this one every
  // progress_interval_s until they have all returned (each returns when its
  // phase's work is done or the run stops). This thread sleeps on a
  // condition the last of them signals, so a phase of little work (one plan
  // re-scored) ends when it does, not at the next tick of a poll.
  auto run_phase = [&](auto body) {
    std::mutex m;
    std::condition_variable cv;
    int returned = 0;
    std::vector<std::thread> threads;
    for (int i = 0; i < jobs; ++i)
      threads.emplace_back([&, i] {
        body(static_cast<std::size_t>(i));
        {
          std::lock_guard lock(m);
          ++returned;
        }
        cv.notify_one();
      });
    const auto interval = std::chrono::duration<double>(std::min(opt.progress_interval_s, 3600.0));
    auto next_report = Clock::now() + std::chrono::duration_cast<Clock::duration>(interval);
    std::unique_lock lock(m);
    while (returned < jobs) {
      if (cv.wait_until(lock, next_report, [&] { return returned >= jobs; })) break;
      next_report = Clock::now() + std::chrono::duration_cast<Clock::duration>(interval);
      lock.unlock();
      try {
        progress();
      } catch (...) {
        fail();
      }
      lock.lock();
    }
    lock.unlock();
    for (auto& th : threads) th.join();
    if (error) std::rethrow_exception(error);
  };

  run_phase([&](std::size_t i) { check(tallies[i], found[i]); });
  for (auto& f : found)
    candidates.insert(candidates.end(), std::make_move_iterator(f.begin()), std::make_move_iterator(f.end()));
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.cost != b.cost ? a.cost > b.cost : a.index < b.index;
  });
  for (const auto& c : candidates) cost_total += c.cost;
  {
    std::unordered_map<std::string_view, std::size_t> first;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      std::size_t g = groups.size();
      if (opt.share_equivalent) g = first.try_emplace(candidates[i].key, groups.size()).first->second;
      if (g == groups.size()) groups.emplace_back();
      groups[g].push_back(i);
    }
  }
  res.scored_classes = groups.size();
  to_score = candidates.size();
  next = 0;
  scoring_start = Clock::now().time_since_epoch().count();
  scoring = true;
  const auto scoring_t0 = Clock::now();
  run_phase([&](std::size_t i) { score(tallies[i]); });
  res.scoring_s = std::chrono::duration<double>(Clock::now() - scoring_t0).count();
  progress();

  for (auto& t : tallies) {
    res.invalid += t.invalid;
    res.pruned += t.pruned;
    res.not_modelled += t.not_modelled;
    res.failed += t.failed;
    res.scored += t.scored;
    res.resumed += t.resumed;
    merge_rule_counts(res.rejected, t.rejected);
    merge_rule_counts(res.pruned_by_pool, t.pruned_by_pool);
    res.plans.insert(res.plans.end(), t.plans.begin(), t.plans.end());
  }
  std::sort(res.plans.begin(), res.plans.end(),
            [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  res.pareto = pareto_front(res.plans);
  res.top = top_plans(res.plans, opt.top_k, res.rank_by);

  // Phase 3: the plans kept (Pareto front and top) re-scored by `refine`
  // until every kept plan carries its figures; a refined plan that falls
  // out lets another in, which is refined in the next round.
  const auto refine_t0 = Clock::now();
  std::unordered_set<std::uint64_t> inexact;
  for (const auto& t : tallies) inexact.insert(t.inexact.begin(), t.inexact.end());
  if (opt.refine_kept && (opt.refine || !inexact.empty()) && !res.plans.empty()) {
    // Without a refining scorer, the kept plans whose chunk program folded
    // a pass are replayed layer by layer.
    const Scorer refine = opt.refine ? opt.refine : exact_scorer(sc);
    std::unordered_map<std::uint64_t, std::uint64_t> index_of;
    for (const auto& t : tallies)
      for (const auto& [id, index] : t.feasible) index_of.emplace(id, index);
    std::unordered_map<std::uint64_t, std::size_t> at;  // position in res.plans
    for (std::size_t i = 0; i < res.plans.size(); ++i) at.emplace(res.plans[i].plan_id, i);
    std::unordered_set<std::uint64_t> refined;
    for (;;) {
      std::vector<std::uint64_t> todo;
      for (const auto* list : {&res.pareto, &res.top})
        for (const auto& p : *list)
          if (!refined.count(p.plan_id) && (opt.refine || inexact.count(p.plan_id))) todo.push_back(p.plan_id);
      std::sort(todo.begin(), todo.end());
      todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
      if (todo.empty()) break;
      ++res.refine_rounds;
      std::vector<ScoredPlan> figures(todo.size());
      std::vector<char> fits(todo.size(), 1);
      std::vector<std::optional<Infeasible>> why(todo.size());  // of those that do not fit
      // The lists hold one plan per class: each is refined once for its class.
      next = 0;
      auto work = [&](std::size_t) {
        Scenario pt = sc;
        pt.space.reset();
        try {
          while (!stop.load(std::memory_order_relaxed)) {
            const std::uint64_t k = next.fetch_add(1);
            if (k >= todo.size()) break;
            const std::uint64_t index = index_of.at(todo[k]);
            space_point(sc, space, index, pt.plan, pt.batch);
            const Score score = refine(pt);
            const MemoryEstimate mem = score.memory ? *score.memory : memory_of(pt);
            const double step_s = to_seconds(score.step.step_time);
            const auto goal = estimate_goal(pt);
            figures[k] = ranked_figures(pt, todo[k], step_s, mem, goal);
            figures[k].class_id = res.plans[at.at(todo[k])].class_id;
            // A folded plan whose replayed memory does not fit leaves the ranking.
            fits[k] = mem.feasible() ? 1 : 0;
            why[k] = mem.infeasible;
            if (fits[k] && opt.on_refined)
              opt.on_refined(ScoredOutcome{index, pt, mem, score, figures[k], {}, goal ? &*goal : nullptr});
          }
        } catch (...) {
          fail();
        }
      };
      run_phase(work);
      // A refined plan's figures are its whole class's (the lists hold one
      // plan per class; the next of a class would otherwise come in unrefined
      // and be replayed in a round of its own), and so is its removal.
      std::unordered_map<std::uint64_t, std::vector<std::size_t>> members;  // class → positions in res.plans
      for (std::size_t i = 0; i < res.plans.size(); ++i)
        if (res.plans[i].class_id != 0) members[res.plans[i].class_id].push_back(i);
      std::unordered_set<std::uint64_t> dropped;
      for (std::size_t k = 0; k < figures.size(); ++k) {
        const auto& f = figures[k];
        const auto it = members.find(f.class_id);
        const std::vector<std::size_t> of_class =
            f.class_id != 0 && it != members.end() ? it->second : std::vector<std::size_t>{at.at(f.plan_id)};
        for (const std::size_t i : of_class) {
          const std::uint64_t id = res.plans[i].plan_id;
          refined.insert(id);
          if (!fits[k]) {
            // Pruned by memory, in its pool's count as the scoring pass's are.
            if (dropped.insert(id).second) count_pruned(res.pruned_by_pool, *why[k], index_of.at(id));
            continue;
          }
          res.plans[i] = f;
          res.plans[i].plan_id = id;
        }
        if (fits[k]) res.refined.push_back(f);
      }
      if (!dropped.empty()) {
        std::erase_if(res.plans, [&](const ScoredPlan& p) { return dropped.count(p.plan_id) > 0; });
        res.pruned += dropped.size();
        res.scored -= dropped.size();
        at.clear();
        for (std::size_t i = 0; i < res.plans.size(); ++i) at.emplace(res.plans[i].plan_id, i);
      }
      res.pareto = pareto_front(res.plans);
      res.top = top_plans(res.plans, opt.top_k, res.rank_by);
    }
    std::sort(res.refined.begin(), res.refined.end(),
              [](const ScoredPlan& a, const ScoredPlan& b) { return a.plan_id < b.plan_id; });
  }
  res.refine_s = std::chrono::duration<double>(Clock::now() - refine_t0).count();
  res.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

}  // namespace strata::strategies
