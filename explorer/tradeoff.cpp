#include "explorer/tradeoff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "costmodel/time_model.hpp"
#include "sim/error.hpp"
#include "lowering/memory.hpp"
#include "lowering/coarse.hpp"
#include "lowering/step_costs.hpp"
#include "lowering/step_layout.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {

namespace {

// The optimal solver's inner steps a trade-off may take: about 10 s at the
// rate measured on 200- and 400-stage chains at 100 levels, 0.6–1.2·10⁹
// steps per second (docs/performance.md).
constexpr double kMaxFrontierSteps = 1e10;
// A transformer plan's trade-off: (budgets + 2) optimal-recompute tables of
// (layers per chunk)² cells each, about 1.5·10⁷ cells a second measured
// (gpt2-124m widths at 4,000 and 10,000 layers over 2 stages, 16 budgets:
// 3.9 and 32 s with a build beside it); 2·10⁸ is about 10 s.
constexpr double kMaxPlanTableCells = 2e8;

remat::Chain layer_chain(const Scenario& sc, const ModelStepCosts& costs) {
  // Each stage timed as the step prices it: its block of the op chain
  // (one Stage op, costmodel/ops.cpp's expand_chain), forward and backward.
  const cost::LayerChain& lc = *sc.model.chain;
  const cost::OpChain& oc = costs.chain();
  const std::int64_t b = sc.batch.micro;
  remat::Chain c;
  c.input = lc.input_bytes * b;
  for (std::size_t i = 0; i < lc.layers.size(); ++i) {
    const auto& l = lc.layers[i];
    const cost::Layer& block = oc.block_at(static_cast<std::int64_t>(i));
    c.stages.push_back({costs.layer(block, Pass::Forward, false), costs.layer(block, Pass::Backward, false), l.output_bytes * b,
                        l.saved_bytes * b, l.workspace_bytes * b, l.workspace_bytes * b});
  }
  return c;
}

remat::Chain transformer_chain(const Scenario& sc, const ModelStepCosts& costs) {
  if (sc.plan.pp > 1)
    throw InputError(sc.file, "plan.pp",
                     "strata tradeoff models one chain per GPU (pp = 1); a pipeline stage's "
                     "microbatches overlap");
  const cost::OpChain oc = cost::expand(sc.model, expand_options(sc));
  auto comm = [&](const cost::Layer& l, Pass pass) {
    return costs.layer_comm(l, CommKind::TP, pass) + costs.layer_comm(l, CommKind::CP, pass) +
           costs.layer_comm(l, CommKind::EP, pass);
  };
  // A layer's saved bytes include its input (the previous stage's output).
  auto stage = [&](const cost::Layer& l, Bytes output, bool block) {
    return remat::Stage{costs.layer(l, Pass::Forward, false) + (block ? comm(l, Pass::Forward) : 0),
                        costs.layer(l, Pass::Backward, false) + (block ? comm(l, Pass::Backward) : 0),
                        output,
                        std::max<Bytes>(0, l.saved_bytes() - l.input_bytes),
                        0,
                        l.max_grad_bytes()};
  };
  remat::Chain c;
  c.input = oc.embedding.input_bytes;
  c.stages.push_back(stage(oc.embedding, oc.main_block().input_bytes, false));
  for (std::int64_t i = 0; i < oc.blocks; ++i)
    c.stages.push_back(stage(oc.block_at(i),
                             i + 1 < oc.blocks ? oc.block_at(i + 1).input_bytes : oc.head.input_bytes, true));
  // The head ends in the loss: its output is a scalar.
  c.stages.push_back(stage(oc.head, 1, false));
  return c;
}

Bytes fixed_bytes(const Scenario& sc) {
  const MemoryRules rules;
  if (!sc.model.chain) {
    // The analytical model's states, communication buffers, workspace and
    // runtime for the plan without recompute.
    Scenario plain = sc;
    plain.plan.recompute = Recompute::None;
    plain.plan.memory_budget_GiB.reset();
    const MemoryEstimate m = estimate_memory(plain, rules);
    Bytes b = 0;
    using sim::MemTag;
    for (MemTag t : {MemTag::Params, MemTag::Grads, MemTag::OptimizerStates, MemTag::CommBuffers,
                     MemTag::Workspace, MemTag::Runtime})
      b += m.breakdown[static_cast<std::size_t>(t)];
    return b;
  }
  if (is_factored(sc.plan.optimizer))
    throw InputError(sc.file, "plan.optimizer",
                     std::string(enum_name(sc.plan.optimizer)) +
                         " keeps statistics per weight-matrix shape, which a layer chain does "
                         "not give; use an element-wise optimizer");
  const PerParam per = bytes_per_param(sc.plan);
  const double psi = static_cast<double>(sc.model.chain->params());
  const ModelStates st = zero_model_states(psi, per, static_cast<int>(sc.plan.zero), zero_shards(sc.plan));
  return static_cast<Bytes>(st.total()) + rules.runtime_bytes + rules.cublas_workspace_bytes;
}

// Snapshot counts tried for revolve: every count up to 16, then about 12 % apart.
std::vector<int> snapshot_counts(int n) {
  std::vector<int> out;
  for (int s = 1; s < std::max(n, 2); s = s < 16 ? s + 1 : s + std::max(1, s / 8))
    out.push_back(s);
  return out;
}

remat::Chain chain_of(const Scenario& sc, const ModelStepCosts& costs) {
  return sc.model.chain ? layer_chain(sc, costs) : transformer_chain(sc, costs);
}

// Per budget, the fastest of a policy's points within it.
TradeoffCurve best_within(const std::vector<Bytes>& budgets, RematPolicy p,
                          const std::vector<TradeoffPoint>& candidates) {
  TradeoffCurve c{p, {}};
  for (const Bytes budget : budgets) {
    std::optional<TradeoffPoint> best;
    for (const auto& q : candidates)
      if (q.peak <= budget && (!best || q.time < best->time)) best = q;
    c.best.push_back(best);
  }
  return c;
}

// Budgets evenly spaced from `hi` down to `lo`.
std::vector<Bytes> sweep(Bytes hi, Bytes lo, int n) {
  std::vector<Bytes> out;
  for (int j = 0; j < n; ++j)
    out.push_back(hi - static_cast<Bytes>(std::llround(static_cast<double>(hi - lo) * j / (n - 1))));
  return out;
}

}  // namespace

remat::Chain remat_chain(const Scenario& sc) { return chain_of(sc, ModelStepCosts(sc)); }

Tradeoff tradeoff(const Scenario& sc, const TradeoffOptions& o) {
  if (o.budgets < 2) throw Error("tradeoff: needs at least two budgets");
  if (!sc.model.chain && sc.plan.pp > 1) return plan_tradeoff(sc, o);
  const ModelStepCosts costs(sc);
  const remat::Chain chain = chain_of(sc, costs);
  Tradeoff t;
  t.model = sc.model.name;
  t.stages = chain.size();
  t.shape = "a chain of " + std::to_string(t.stages) + " stages";
  t.microbatches = microbatches(sc.plan, sc.batch);
  t.fixed_bytes = fixed_bytes(sc);
  // Parameters this GPU steps: the chain's, or the transformer's on one
  // tensor-parallel rank.
  const double params = static_cast<double>(
      sc.model.chain ? sc.model.chain->params()
                     : cost::expand(sc.model, expand_options(sc)).params());
  t.optimizer_time = costs.optimizer_step(
      sc.plan.zero >= 1 ? params / static_cast<double>(zero_shards(sc.plan)) : params, false);
  t.framework_time =
      costs.overhead_per_step() + 2 * t.microbatches * costs.overhead_per_microbatch();
  t.compute = chain.compute();
  t.no_savings = t.step_time(t.compute);
  t.gpu_bytes = sc.cluster.gpu.memory_bytes();

  // The optimal solver's tables grow as stages³ × levels: refused, named,
  // where they would take more than seconds (kMaxFrontierSteps).
  if (const double steps = remat::frontier_steps(chain, o.levels); steps > kMaxFrontierSteps) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "the optimal solver over %d stages at %d memory levels takes about %.2g steps "
                  "(Strata allows %.2g, about 10 s; rule tradeoff-size): use fewer levels (--levels) "
                  "or fewer, coarser stages",
                  chain.size(), o.levels, steps, kMaxFrontierSteps);
    throw InputError(sc.file, sc.model.chain ? "model.chain" : "model.layers", buf);
  }
  std::function<void(double, double)> tables;
  if (o.progress)
    tables = [&](double done, double total) {
      o.progress("solving optimal recompute's tables (steps)", static_cast<std::uint64_t>(done),
                 static_cast<std::uint64_t>(total));
    };
  const std::vector<remat::FrontierPoint> frontier = remat::optimal_frontier(chain, o.levels, tables);
  const Bytes hi = remat::build(chain, remat::store_all(chain)).peak;
  const Bytes lo = frontier.front().peak;
  t.budgets = sweep(hi, lo, o.budgets);

  // Each policy's candidate schedules; its curve keeps, per budget, the
  // fastest candidate within it.
  auto point = [&](const remat::Decisions& d, std::string setting) {
    const remat::Schedule s = remat::build(chain, d);
    return TradeoffPoint{s.peak, t.step_time(s.time), std::move(setting)};
  };
  auto curve = [&](RematPolicy p, const std::vector<TradeoffPoint>& candidates) {
    return best_within(t.budgets, p, candidates);
  };
  const int n = chain.size();
  t.curves.push_back(curve(RematPolicy::None, {point(remat::store_all(chain), "")}));
  std::vector<TradeoffPoint> every;
  for (int k = 1; k <= n; ++k)
    every.push_back(point(remat::segments(chain, k), "k=" + std::to_string(k)));
  t.curves.push_back(curve(RematPolicy::EveryK, every));
  t.curves.push_back(
      curve(RematPolicy::Sqrt, {point(remat::sqrt_segments(chain),
                                      "k=" + std::to_string(remat::sqrt_segment(n)))}));
  std::vector<TradeoffPoint> rev;
  for (int s : snapshot_counts(n))
    rev.push_back(point(remat::revolve(chain, s), "snaps=" + std::to_string(s)));
  t.curves.push_back(curve(RematPolicy::Revolve, rev));
  std::vector<TradeoffPoint> opt;
  for (const auto& f : frontier) opt.push_back({f.peak, t.step_time(f.time), ""});
  t.curves.push_back(curve(RematPolicy::Optimal, opt));
  return t;
}

Tradeoff plan_tradeoff(const Scenario& sc, const TradeoffOptions& o) {
  if (o.budgets < 2) throw Error("tradeoff: needs at least two budgets");
  require_transformer(sc, "the plan's trade-off");
  if (sc.plan.offload.activations && sc.plan.offload.planner == OffloadPlanner::Joint)
    throw InputError(sc.file, "plan.offload.planner",
                     "the joint planner decides recompute itself: no recompute policy to vary");
  const ModelStepCosts costs(sc);
  struct Measured {
    MemoryEstimate mem;
    Time step;
  };
  // Plans timed: none, least, every_k's lengths, the budgets, selective,
  // full and sqrt (`planned` is set once the lengths are known).
  std::uint64_t timed = 0, planned = 0;
  auto measure = [&](Recompute r, std::int64_t k, std::optional<Bytes> budget) {
    if (o.progress && planned) o.progress("timing the plan's recompute choices (plans)", timed, planned);
    ++timed;
    Scenario x = sc;
    x.plan.recompute = r;
    x.plan.recompute_k = k;
    x.plan.memory_budget_GiB.reset();
    if (budget) x.plan.memory_budget_GiB = static_cast<double>(*budget) / static_cast<double>(kGiB);
    else if (sc.plan.offload.activations && sc.plan.offload.planner == OffloadPlanner::Priority)
      x.plan.memory_budget_GiB = sc.plan.memory_budget_GiB;
    const LayerPlan layers = plan_layers(x, costs);
    return Measured{estimate_memory(x, {}, layers), predict_step_coarse(x, costs).step_time};
  };
  // The optimal solver runs once per budget (and for the least memory),
  // each over a table of (layers of the longest chunk)² cells: refused,
  // named, where that takes more than seconds (kMaxPlanTableCells).
  std::int64_t most = 0;
  for (const std::int64_t n : chunk_layers(sc.plan, sc.model.layers)) most = std::max(most, n);
  if (const double cells = static_cast<double>(o.budgets + 2) * static_cast<double>(most) * static_cast<double>(most);
      cells > kMaxPlanTableCells) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "the trade-off solves optimal recompute %d times over chunks of up to %lld layers, about "
                  "%.2g table cells (Strata allows %.2g, about 10 s; rule tradeoff-size): use more pipeline "
                  "stages or fewer budgets (--budgets)",
                  o.budgets + 2, static_cast<long long>(most), cells, kMaxPlanTableCells);
    throw InputError(sc.file, "model.layers", buf);
  }
  const Measured none = measure(Recompute::None, 1, std::nullopt);
  Tradeoff t;
  t.model = sc.model.name;
  t.stages = static_cast<int>(sc.model.layers);
  t.shape = std::to_string(sc.model.layers) + " layers over " + std::to_string(sc.plan.pp) +
            " pipeline stage" + (sc.plan.pp > 1 ? "s" : "");
  t.microbatches = microbatches(sc.plan, sc.batch);
  // Budgets and points are measured as the fit and the planners measure
  // them, without the allocator's reserve (docs/memory-model.md, "Fits"):
  // a plan's peak stage less its reserve, and of that what no savings holds
  // beside its activations is fixed.
  using sim::MemTag;
  const auto required = [](const MemoryEstimate& m) {
    return m.stages[static_cast<std::size_t>(m.peak_stage)].required();
  };
  t.fixed_bytes = required(none.mem) - none.mem.breakdown[static_cast<std::size_t>(MemTag::Activations)];
  t.no_savings = none.step;
  t.gpu_bytes = sc.cluster.gpu.memory_bytes();
  auto point = [&](const Measured& m, std::string setting) {
    return TradeoffPoint{required(m.mem) - t.fixed_bytes, m.step, std::move(setting)};
  };
  // The least optimal recompute reaches: its choices within no budget at all.
  const Measured least = measure(Recompute::Optimal, 1, Bytes{1});
  t.budgets = sweep(point(none, "").peak, point(least, "").peak, o.budgets);
  // Segments of every length up to 64 layers, then lengths 1.25 times
  // apart up to the longest chunk (its whole length last): each point is
  // a replay over the layers, so trying every length grew as layers² (a
  // 6,000-layer plan took 36 s); at most 64 + 50 points at 100,000 layers.
  std::vector<std::int64_t> lengths;
  for (std::int64_t k = 1; k <= most; k = k < 64 ? k + 1 : (k * 5 + 3) / 4) lengths.push_back(k);
  if (lengths.back() != most) lengths.push_back(most);
  planned = timed + lengths.size() + t.budgets.size() + 3;
  std::vector<TradeoffPoint> every;
  for (const std::int64_t k : lengths)
    every.push_back(point(measure(Recompute::EveryK, k, std::nullopt), "k=" + std::to_string(k)));
  std::vector<TradeoffPoint> optimal = {point(least, "")};
  for (const Bytes b : t.budgets) optimal.push_back(point(measure(Recompute::Optimal, 1, t.fixed_bytes + b), ""));
  t.curves = {best_within(t.budgets, RematPolicy::None, {point(none, "")}),
              best_within(t.budgets, RematPolicy::Selective,
                          {point(measure(Recompute::Selective, 1, std::nullopt), "")}),
              best_within(t.budgets, RematPolicy::Full, {point(measure(Recompute::Full, 1, std::nullopt), "")}),
              best_within(t.budgets, RematPolicy::EveryK, every),
              best_within(t.budgets, RematPolicy::Sqrt,
                          {point(measure(Recompute::Sqrt, 1, std::nullopt), "")}),
              best_within(t.budgets, RematPolicy::Optimal, optimal)};
  if (o.progress) o.progress("timing the plan's recompute choices (plans)", timed, planned);
  return t;
}

}  // namespace strata::strategies
