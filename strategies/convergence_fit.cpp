#include "strategies/convergence_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "sim/error.hpp"

namespace strata::strategies {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::optional<double> to_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t used = 0;
  try {
    const double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Four significant digits: the fitted file reads as the docs quote it.
double round4(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(std::fabs(v))));
  return std::round(v * scale) / scale;
}

std::string g4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string batch_list(const std::vector<std::int64_t>& b) {
  std::string s;
  for (auto x : b) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

constexpr double kNever = std::numeric_limits<double>::infinity();

}  // namespace

FitSetting parse_fit_setting(const std::string& text, const std::string& option) {
  auto fail = [&](const std::string& rule) -> FitSetting {
    throw InputError(option, "", "\"" + text + "\": " + rule);
  };
  FitSetting f;
  f.name = text;
  std::string body = text;
  if (const auto at = text.find('@'); at != std::string::npos) {
    body = text.substr(0, at);
    const auto m = to_number(text.substr(at + 1));
    if (!m || *m <= 0) return fail("the learning-rate multiplier after @ must be a number > 0");
    f.lr_multiplier = *m;
  }
  const auto parts = split(body, ':');
  if (parts.empty()) return fail("empty setting");
  const std::string& kind = parts[0];
  auto need = [&](std::size_t lo, std::size_t hi) {
    if (parts.size() < lo || parts.size() > hi)
      fail("expected " + std::string(lo == hi && lo == 1 ? "no parameter" : "a parameter") +
           " (none, topk:RATIO[:noef], randomk:RATIO[:noef], qsgd:BITS, onebit, powersgd:RANK, opt:OPTIMIZER, "
           "sched:SCHEDULE)");
  };
  if (kind == "none") {
    need(1, 1);
    return f;
  }
  if (kind == "sched") {
    need(2, 2);
    const auto sc = enum_from_name<Schedule>(parts[1]);
    if (!sc || (*sc != Schedule::PipeDream && *sc != Schedule::PipeDream2BW))
      return fail("the schedule must be pipedream or pipedream-2bw (the asynchronous ones)");
    f.schedule = *sc;
    return f;
  }
  if (kind == "opt") {
    need(2, 2);
    const auto o = enum_from_name<Optimizer>(parts[1]);
    if (!o) return fail("unknown optimizer (one of " + enum_choices<Optimizer>() + ")");
    f.optimizer = *o;
    return f;
  }
  const auto m = enum_from_name<CompressionMethod>(kind);
  if (!m) return fail("unknown setting (none, topk, randomk, qsgd, onebit, powersgd, opt or sched)");
  f.compression.method = *m;
  switch (*m) {
    case CompressionMethod::TopK:
    case CompressionMethod::RandomK: {
      need(2, 3);
      const auto r = to_number(parts[1]);
      if (!r || *r <= 0 || *r > 1) return fail("the ratio must be in (0, 1]");
      f.compression.ratio = *r;
      if (parts.size() == 3) {
        if (parts[2] != "noef" && parts[2] != "ef") return fail("the third part must be ef or noef");
        f.compression.error_feedback = parts[2] == "ef";
      }
      break;
    }
    case CompressionMethod::Qsgd:
    case CompressionMethod::PowerSgd: {
      need(2, 2);
      const auto v = to_number(parts[1]);
      const double hi = *m == CompressionMethod::Qsgd ? 16 : 65536;
      if (!v || *v != std::floor(*v) || *v < 1 || *v > hi)
        return fail(std::string(*m == CompressionMethod::Qsgd ? "bits" : "the rank") +
                    " must be an integer in [1, " + g4(hi) + "]");
      (*m == CompressionMethod::Qsgd ? f.compression.bits : f.compression.rank) =
          static_cast<std::int64_t>(*v);
      break;
    }
    default: need(1, 1); break;
  }
  return f;
}

double mean_steps_to_target(const FitInput& in, const std::string& setting, std::int64_t batch, double lr) {
  double sum = 0;
  int n = 0;
  for (const auto& r : in.runs)
    if (r.setting == setting && r.batch == batch && r.lr == lr) {
      sum += r.steps.empty() || !r.steps[0] ? kNever : *r.steps[0];
      ++n;
    }
  return n ? sum / n : kNever;
}

std::optional<double> best_lr(const FitInput& in, std::int64_t batch) {
  const std::string& base = in.settings.front().name;
  std::set<double> rates;
  for (const auto& r : in.runs)
    if (r.setting == base && r.batch == batch) rates.insert(r.lr);
  std::optional<double> best;
  double best_mean = kNever;
  for (const double lr : rates) {
    const double mean = mean_steps_to_target(in, base, batch, lr);
    if (!best || mean < best_mean) {
      best = lr;
      best_mean = mean;
    }
  }
  return best;
}

CriticalBatch fit_critical_batch(const std::vector<StepsAtBatch>& pts) {
  std::set<double> distinct;
  for (const auto& p : pts) distinct.insert(p.batch_tokens);
  if (distinct.size() < 2)
    throw Error("fit: S(B) = S_min (1 + B_noise/B) needs steps at two or more batch sizes");
  // Relative residual (a + b/B − S)/S = a·u + b·u/B − 1 with u = 1/S: linear
  // least squares in (a, b) = (S_min, E_min).
  double suu = 0, suv = 0, svv = 0, su = 0, sv = 0;
  for (const auto& p : pts) {
    const double u = 1.0 / p.steps, v = u / p.batch_tokens;
    suu += u * u;
    suv += u * v;
    svv += v * v;
    su += u;
    sv += v;
  }
  const double det = suu * svv - suv * suv;
  double a = (su * svv - sv * suv) / det;
  double b = (suu * sv - suv * su) / det;
  if (b < 0) {  // steps that do not fall with the batch: no noise term
    b = 0;
    a = su / suu;
  }
  if (!(a > 0))
    throw Error("fit: the steps fall faster than 1/B, so no positive S_min fits S(B) = S_min (1 + B_noise/B)");
  return {a, b / a};
}

double fit_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c) {
  double s = 0;
  for (const auto& p : pts) s += std::log(p.steps / steps_at_batch(c, p.batch_tokens));
  return std::exp(s / static_cast<double>(pts.size()));
}

Penalty fit_two_factor_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c) {
  Penalty p;
  std::set<double> distinct;
  for (const auto& q : pts) distinct.insert(q.batch_tokens);
  if (distinct.size() >= 2 && c.b_noise_tokens > 0) {
    try {
      const CriticalBatch own = fit_critical_batch(pts);
      const double a = own.s_min_steps / c.s_min_steps;
      const double b = own.s_min_steps * own.b_noise_tokens / (c.s_min_steps * c.b_noise_tokens);
      if (a > 0 && b > 0) {
        p.factor = a;
        p.noise_factor = b;
        return p;
      }
    } catch (const Error&) {
      // falls back to one factor
    }
  }
  p.factor = fit_penalty(pts, c);
  return p;
}

Penalty fit_biased_penalty(const std::vector<StepsAtBatch>& pts, const CriticalBatch& c) {
  std::set<double> distinct;
  for (const auto& q : pts) distinct.insert(q.batch_tokens);
  if (distinct.size() < 3 || !(c.b_noise_tokens > 0)) return fit_two_factor_penalty(pts, c);
  // Dividing a point's steps by (1 + b·B_noise/B) divides its predicted
  // steps by the same: relative errors are unchanged, so each b is a
  // two-factor fit.
  std::optional<Penalty> best;
  double best_res = 0;
  for (int k = -65; k <= 64; ++k) {
    const double bf = k < -64 ? 0.0 : std::exp2(k / 8.0);
    std::vector<StepsAtBatch> scaled = pts;
    for (auto& q : scaled) q.steps /= 1.0 + bf * c.b_noise_tokens / q.batch_tokens;
    Penalty p = fit_two_factor_penalty(scaled, c);
    if (!p.noise_factor) continue;
    p.bias_factor = bf;
    double res = 0;
    for (const auto& q : pts) {
      const double e = p.at_batch(q.batch_tokens, c.b_noise_tokens) * steps_at_batch(c, q.batch_tokens) / q.steps - 1;
      res += e * e;
    }
    if (!best || res < best_res) {
      best = p;
      best_res = res;
    }
  }
  if (!best) return fit_two_factor_penalty(pts, c);
  return *best;
}

double log_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

FitOutcome fit_convergence_model(const FitInput& in) {
  if (in.settings.empty() || !in.settings.front().baseline())
    throw Error("fit: the first setting must be the baseline (\"none\")");
  if (in.target_losses.empty()) throw Error("fit: no target loss");
  FitOutcome out;
  const std::size_t targets = in.target_losses.size();
  const double seq = static_cast<double>(in.seq_len);
  auto held = [&](std::int64_t b) {
    return std::find(in.held_out.begin(), in.held_out.end(), b) != in.held_out.end();
  };

  // The runs of one setting at one (batch, lr), in the order batches appear.
  struct Group {
    std::int64_t batch;
    double lr;
    std::vector<const FitRun*> runs;
  };
  auto groups_of = [&](const FitSetting& s) {
    std::vector<Group> gs;
    std::set<std::int64_t> batches;
    for (const auto& r : in.runs)
      if (r.setting == s.name) batches.insert(r.batch);
    for (const std::int64_t b : batches) {
      // The baseline at its best rate; a setting at each rate it ran with.
      std::map<double, std::vector<const FitRun*>> by_lr;
      for (const auto& r : in.runs)
        if (r.setting == s.name && r.batch == b) by_lr[r.lr].push_back(&r);
      if (s.baseline()) {
        const double lr = *best_lr(in, b);
        gs.push_back({b, lr, by_lr.at(lr)});
      } else {
        for (auto& [lr, rs] : by_lr) gs.push_back({b, lr, rs});
      }
    }
    return gs;
  };
  // Mean steps to target k over a group, when every run reached it.
  auto mean_steps = [&](const Group& g, std::size_t k) -> std::optional<double> {
    double sum = 0;
    for (const auto* r : g.runs) {
      if (k >= r->steps.size() || !r->steps[k]) return std::nullopt;
      sum += *r->steps[k];
    }
    return sum / static_cast<double>(g.runs.size());
  };

  const FitSetting& base = in.settings.front();
  const auto base_groups = groups_of(base);
  std::vector<std::int64_t> fit_batches;
  for (const auto& g : base_groups)
    if (!held(g.batch) && mean_steps(g, 0)) fit_batches.push_back(g.batch);
  for (std::size_t k = 0; k < targets; ++k) {
    std::vector<StepsAtBatch> pts;
    for (const auto& g : base_groups)
      if (!held(g.batch))
        if (const auto m = mean_steps(g, k)) pts.push_back({static_cast<double>(g.batch) * seq, *m});
    if (k == 0) {
      out.per_target.push_back(fit_critical_batch(pts));
      continue;
    }
    try {
      out.per_target.push_back(fit_critical_batch(pts));
    } catch (const Error& e) {
      out.notes.push_back("target loss " + g4(in.target_losses[k]) + " left out of the loss scaling: " + e.what());
      break;
    }
  }

  ConvergenceModel& m = out.model;
  m = in.base;
  m.file.clear();
  m.lr.reset();
  m.target_loss = in.target_losses[0];
  const std::string how = "fitted by strata fit-convergence (" + in.source + ")";
  const CriticalBatch c{round4(out.per_target[0].s_min_steps), round4(out.per_target[0].b_noise_tokens)};
  m.s_min_steps = {c.s_min_steps, how + ": least squares of S(B) = S_min (1 + B_noise/B) on relative "
                                        "errors over the baseline at batches " + batch_list(fit_batches) +
                                        " sequences, the best learning rate at each"};
  m.b_noise_tokens = {c.b_noise_tokens, m.s_min_steps.source};
  m.loss_scaling.reset();
  if (out.per_target.size() >= 2) {
    std::vector<double> above, loss, smin, bnoise;
    for (std::size_t k = 0; k < out.per_target.size(); ++k) {
      above.push_back(in.target_losses[k] - in.loss_floor);
      loss.push_back(in.target_losses[k]);
      smin.push_back(out.per_target[k].s_min_steps);
      bnoise.push_back(std::max(out.per_target[k].b_noise_tokens, 1e-9));
    }
    std::string losses;
    for (double l : loss) losses += (losses.empty() ? "" : ", ") + g4(l);
    const std::string over = " over the fits at target losses " + losses;
    m.loss_scaling = LossScaling{
        {round4(in.loss_floor), how + ": the best loss on the held-out data (the corpus's own model of it)"},
        {round4(-log_slope(above, smin)), how + ": slope of log S_min over log(L − floor)" + over},
        {round4(-log_slope(loss, bnoise)), how + ": slope of log B_noise over log L" + over}};
  }

  auto add_points = [&](const FitSetting& s, const std::vector<Group>& gs, const Penalty& penalty) {
    for (const auto& g : gs) {
      FitPoint p;
      p.setting = s.name;
      p.batch = g.batch;
      p.lr = g.lr;
      p.held_out = held(g.batch);
      p.runs = static_cast<int>(g.runs.size());
      for (const auto* r : g.runs) {
        if (r->steps.empty() || !r->steps[0]) continue;
        ++p.reached;
        const double v = *r->steps[0];
        p.min = p.min ? std::min(*p.min, v) : v;
        p.max = p.max ? std::max(*p.max, v) : v;
      }
      p.mean = mean_steps(g, 0);
      const double b = static_cast<double>(g.batch) * seq;
      p.predicted = penalty.at_batch(b, c.b_noise_tokens) * steps_at_batch(c, b);
      if (p.mean) p.error = std::fabs(p.predicted - *p.mean) / *p.mean;
      out.points.push_back(p);
    }
  };
  add_points(base, base_groups, Penalty{});
  m.optimizer[in.optimizer] = {1.0, std::nullopt, how + ": the baseline's optimizer, the reference"};

  // Measured compression points replace the base model's for their method.
  std::vector<CompressionPenalty> measured;
  for (std::size_t i = 1; i < in.settings.size(); ++i) {
    const FitSetting& s = in.settings[i];
    const auto gs = groups_of(s);
    std::vector<StepsAtBatch> pts;
    std::vector<std::int64_t> used;
    for (const auto& g : gs)
      if (!held(g.batch))
        if (const auto mean = mean_steps(g, 0)) {
          pts.push_back({static_cast<double>(g.batch) * seq, *mean});
          used.push_back(g.batch);
        }
    if (pts.empty()) {
      out.notes.push_back(s.name + ": no batch outside the held-out ones reached the target in every run; no penalty fitted");
      add_points(s, gs, Penalty{std::numeric_limits<double>::quiet_NaN(), {}, {}});
      continue;
    }
    const std::string rate = s.lr_multiplier != 1 ? ", learning rate x" + g4(s.lr_multiplier) : std::string();
    const bool biased = sparse_compression(s.compression.method) && !s.compression.error_feedback && !s.optimizer &&
                        !s.schedule;
    Penalty p = biased ? fit_biased_penalty(pts, c) : fit_two_factor_penalty(pts, c);
    p.factor = round4(p.factor);
    if (p.noise_factor) p.noise_factor = round4(*p.noise_factor);
    if (p.bias_factor) p.bias_factor = round4(*p.bias_factor);
    p.source = how + ": " + s.name + (s.schedule ? " (2 pipeline stages, 1 version behind)" : "") +
               " against the baseline at batches " + batch_list(used) + " sequences, " +
               (p.bias_factor ? "least squares of S(B) = S_min (factor + noise_factor B_noise/B) (1 + "
                                      "bias_factor B_noise/B) (a biased compressor without error feedback)"
                : p.noise_factor ? "least squares of S(B) = S_min (factor + noise_factor B_noise/B)"
                                 : "geometric mean of measured / S(B)") +
               rate + (s.schedule ? "; per version of lag: the factors minus 1" : "");
    add_points(s, gs, p);
    out.penalties.push_back({s.name, p});
    if (s.schedule) {
      m.staleness_per_step = {round4(p.factor - 1),
                              p.noise_factor ? std::optional<double>(round4(*p.noise_factor - 1)) : std::nullopt,
                              p.source};
      continue;
    }
    if (s.optimizer) {
      m.optimizer[*s.optimizer] = p;
      continue;
    }
    const Compression& cm = s.compression;
    const bool sparse = sparse_compression(cm.method);
    const double at = penalty_parameter(cm);
    auto it = std::find_if(measured.begin(), measured.end(), [&](const CompressionPenalty& e) {
      return e.method == cm.method && (!sparse || e.error_feedback == cm.error_feedback);
    });
    if (it == measured.end()) {
      measured.push_back({cm.method, sparse ? cm.error_feedback : true, {}});
      it = std::prev(measured.end());
    }
    it->points.push_back({at, p});
    std::sort(it->points.begin(), it->points.end(),
              [](const PenaltyPoint& a, const PenaltyPoint& b) { return a.at < b.at; });
  }
  for (auto& e : measured) {
    auto it = std::find_if(m.compression.begin(), m.compression.end(), [&](const CompressionPenalty& x) {
      return x.method == e.method && x.error_feedback == e.error_feedback;
    });
    if (it != m.compression.end())
      *it = e;
    else
      m.compression.push_back(e);
  }

  std::vector<double> errors;
  for (const auto& p : out.points)
    if (p.held_out && p.error && std::isfinite(*p.error)) errors.push_back(*p.error);
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    out.held_out_max_error = errors.back();
    const std::size_t n = errors.size();
    out.held_out_median_error = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
  }
  return out;
}

}  // namespace strata::strategies
