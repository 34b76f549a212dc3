#include "lowering/stragglers.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "strategies/rank_mesh.hpp"

namespace strata::strategies {

namespace {

bool slowed_category(int cat) {
  return cat == static_cast<int>(TimeCat::Compute) || cat == static_cast<int>(TimeCat::Recompute) ||
         cat == static_cast<int>(TimeCat::Optimizer);
}

Time scaled(Time t, double f) { return static_cast<Time>(std::llround(static_cast<double>(t) * f)); }

// The rank's fixed factor list, 1 where cluster.slow names none.
std::vector<double> fixed_rank_factors(const Scenario& sc) {
  const std::int64_t gpus = sc.cluster.gpus();
  const std::int64_t per_node = sc.cluster.node.gpus_per_node;
  std::vector<double> f(static_cast<std::size_t>(gpus), 1.0);
  for (const auto& d : sc.cluster.slow) {
    const std::int64_t lo = d.rank >= 0 ? d.rank : d.node * per_node;
    const std::int64_t hi = d.rank >= 0 ? d.rank + 1 : std::min(gpus, lo + per_node);
    for (std::int64_t r = lo; r < hi; ++r) f[static_cast<std::size_t>(r)] *= d.factor;
  }
  return f;
}

// A uniform draw in (0, 1) from the 53 high bits (the same on every
// platform, unlike the standard distributions).
double uniform(std::mt19937_64& g) { return (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53; }

// A standard normal draw (Box–Muller; the second value is dropped).
double normal(std::mt19937_64& g) {
  const double u = uniform(g), v = uniform(g);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size());
  const auto k = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n))) - 1;
  return sorted[std::min(k, sorted.size() - 1)];
}

StepDistribution summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  StepDistribution d;
  d.mean_s = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  d.p50_s = percentile(v, 0.50);
  d.p90_s = percentile(v, 0.90);
  d.p99_s = percentile(v, 0.99);
  d.max_s = v.back();
  return d;
}

}  // namespace

std::vector<double> fixed_stage_slowdown(const Scenario& sc) {
  if (sc.cluster.slow.empty()) return {};
  const RankMesh mesh(sc.plan, sc.cluster.node.gpus_per_node);
  const std::vector<double> f = fixed_rank_factors(sc);
  std::vector<double> stage(static_cast<std::size_t>(sc.plan.pp), 1.0);
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(f.size()); ++r) {
    if (f[static_cast<std::size_t>(r)] == 1.0) continue;
    auto& s = stage[static_cast<std::size_t>(mesh.coords(r).pp)];
    s = std::max(s, f[static_cast<std::size_t>(r)]);
  }
  return stage;
}

void slow_down(StepProgram& p, std::span<const double> factor) {
  if (factor.size() != static_cast<std::size_t>(p.stages))
    throw Error("slow_down: one factor per stage");
  // Merged passes of one kind share their parts (lower.cpp): each part is
  // scaled once, then every merged task's duration is its parts' sum.
  std::vector<char> scaled_part(p.parts.size(), 0);
  for (auto& t : p.tasks) {
    const double f = factor[static_cast<std::size_t>(t.stage)];
    if (f == 1.0 || t.lane != sim::Lane::Compute) continue;
    if (t.merged) {
      Time d = 0;
      for (std::uint32_t k = t.parts; k < t.parts + t.nparts; ++k) {
        auto& [cat, part] = p.parts[k];
        if (!scaled_part[k] && slowed_category(cat)) part = scaled(part, f);
        scaled_part[k] = 1;
        d += part;
      }
      t.duration = d;
    } else if (slowed_category(time_category(t))) {
      t.duration = scaled(t.duration, f);
    }
  }
}

std::optional<StragglerStats> straggler_distribution(const Scenario& sc, StepProgram& p) {
  if (!sc.cluster.stragglers) return std::nullopt;
  const cost::StragglerModel& m = *sc.cluster.stragglers;
  const std::int64_t gpus = sc.cluster.gpus();
  const std::int64_t per_node = sc.cluster.node.gpus_per_node;
  const std::int64_t dp = sc.plan.dp;
  const auto stages = static_cast<std::size_t>(p.stages);

  // Where each GPU sits: its stage and data-parallel replica.
  const RankMesh mesh(sc.plan, per_node);
  std::vector<std::int32_t> stage_of(static_cast<std::size_t>(gpus)), replica_of(stage_of.size());
  for (std::int64_t r = 0; r < gpus; ++r) {
    const RankCoords c = mesh.coords(r);
    stage_of[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(c.pp);
    replica_of[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(c.dp);
  }
  const std::vector<double> fixed = fixed_rank_factors(sc);
  std::vector<double> given = fixed_stage_slowdown(sc);  // what p already carries
  if (given.empty()) given.assign(stages, 1.0);

  // The program's durations as given, restored before every sample.
  std::vector<Time> durations(p.tasks.size());
  for (std::size_t i = 0; i < p.tasks.size(); ++i) durations[i] = p.tasks[i].duration;
  const auto parts = p.parts;
  auto restore = [&] {
    for (std::size_t i = 0; i < p.tasks.size(); ++i) p.tasks[i].duration = durations[i];
    p.parts = parts;
  };
  ProgramWorkspace w;
  auto step_seconds = [&](std::span<const double> stage_factor) {
    std::vector<double> rel(stages);
    for (std::size_t s = 0; s < stages; ++s) rel[s] = stage_factor[s] / given[s];
    slow_down(p, rel);
    replay(p, w);
    const double t = to_seconds(prediction(sc, p, w.run, false).step_time);
    restore();
    return t;
  };

  // A replica's step with every stage at factor g (asynchronous data
  // parallelism): replayed at g's neighbours on a grid of 0.1 % in log g and
  // interpolated, so a sweep replays once per grid point it reaches.
  constexpr double kGrid = 1e-3;
  std::map<std::int64_t, double> at_grid;
  std::vector<double> uniform_factor(stages);
  auto grid_step = [&](std::int64_t q) {
    auto [it, fresh] = at_grid.try_emplace(q, 0.0);
    if (fresh) {
      std::fill(uniform_factor.begin(), uniform_factor.end(), std::exp(static_cast<double>(q) * kGrid));
      it->second = step_seconds(uniform_factor);
    }
    return it->second;
  };
  auto replica_step = [&](double g) {
    const double x = std::log(g) / kGrid;
    const auto q = static_cast<std::int64_t>(std::floor(x));
    const double lo = grid_step(q), hi = grid_step(q + 1);
    return lo + (hi - lo) * (x - static_cast<double>(q));
  };

  StragglerStats out;
  out.samples = m.samples;
  out.backup_replicas = m.backup_replicas;
  replay(p, w);
  out.nominal_s = to_seconds(prediction(sc, p, w.run, false).step_time);

  std::mt19937_64 gen(m.seed);
  std::vector<double> rank(static_cast<std::size_t>(gpus));
  std::vector<double> all, backup, async, stage(stages), worst(static_cast<std::size_t>(dp));
  std::vector<std::int32_t> order(static_cast<std::size_t>(dp));
  std::vector<char> dropped(static_cast<std::size_t>(dp));
  all.reserve(static_cast<std::size_t>(m.samples));
  const std::int64_t nodes = (gpus + per_node - 1) / per_node;
  for (std::int64_t k = 0; k < m.samples; ++k) {
    // Draw the nodes first, then the GPUs, in rank order.
    for (std::int64_t n = 0; n < nodes; ++n) {
      const double node = m.node_probability > 0 && uniform(gen) < m.node_probability ? m.node_factor : 1.0;
      for (std::int64_t r = n * per_node; r < std::min(gpus, (n + 1) * per_node); ++r)
        rank[static_cast<std::size_t>(r)] = node * fixed[static_cast<std::size_t>(r)];
    }
    if (m.rank_sigma > 0)
      for (auto& f : rank) f *= std::exp(m.rank_sigma * normal(gen));
    auto stage_factors = [&](const std::vector<char>* skip) {
      std::fill(stage.begin(), stage.end(), 0.0);
      for (std::int64_t r = 0; r < gpus; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (skip && (*skip)[static_cast<std::size_t>(replica_of[i])]) continue;
        auto& s = stage[static_cast<std::size_t>(stage_of[i])];
        s = std::max(s, rank[i]);
      }
    };
    stage_factors(nullptr);
    all.push_back(step_seconds(stage));
    // Each replica's slowest GPU.
    std::fill(worst.begin(), worst.end(), 0.0);
    for (std::int64_t r = 0; r < gpus; ++r) {
      const auto i = static_cast<std::size_t>(r);
      auto& w_ = worst[static_cast<std::size_t>(replica_of[i])];
      w_ = std::max(w_, rank[i]);
    }
    if (dp > 1) {
      double rate = 0;
      for (double g : worst) rate += 1.0 / replica_step(g);
      async.push_back(static_cast<double>(dp) / rate);
    }
    if (m.backup_replicas > 0) {
      // The replicas whose slowest GPU is slowest are not waited for.
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        return worst[static_cast<std::size_t>(a)] > worst[static_cast<std::size_t>(b)];
      });
      std::fill(dropped.begin(), dropped.end(), 0);
      for (std::int64_t j = 0; j < m.backup_replicas; ++j)
        dropped[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] = 1;
      stage_factors(&dropped);
      backup.push_back(step_seconds(stage));
    }
  }
  out.all = summarise(std::move(all));
  if (!backup.empty()) out.with_backup = summarise(std::move(backup));
  if (!async.empty()) out.asynchronous = summarise(std::move(async));
  return out;
}

}  // namespace strata::strategies
