#include "strategies/convergence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim/error.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

bool sparse_compression(CompressionMethod m) {
  return m == CompressionMethod::TopK || m == CompressionMethod::RandomK;
}

double penalty_parameter(const Compression& c) {
  switch (c.method) {
    case CompressionMethod::TopK:
    case CompressionMethod::RandomK: return c.ratio;
    case CompressionMethod::Qsgd: return static_cast<double>(c.bits);
    case CompressionMethod::PowerSgd: return static_cast<double>(c.rank);
    default: return 0;
  }
}

CriticalBatch critical_batch_at(const ConvergenceModel& m, double target_loss) {
  CriticalBatch c{m.s_min_steps.value, m.b_noise_tokens.value};
  if (std::abs(target_loss - m.target_loss) <= 1e-9 * std::max(1.0, std::abs(m.target_loss)))
    return c;
  if (!m.loss_scaling)
    throw InputError(m.file, "target_loss",
                     "the fit is for a target loss of " + num(m.target_loss) + ", not " +
                         num(target_loss) +
                         ", and has no loss_scaling to move it (fit one for this target)");
  const auto& ls = *m.loss_scaling;
  const double floor = ls.loss_floor.value;
  if (!(target_loss > floor))
    throw InputError(m.file, "loss_scaling.loss_floor",
                     "a target loss of " + num(target_loss) + " is not above the loss floor " +
                         num(floor) + ": it is never reached");
  c.s_min_steps *= std::pow((m.target_loss - floor) / (target_loss - floor), ls.s_min_exponent.value);
  c.b_noise_tokens *= std::pow(m.target_loss / target_loss, ls.b_noise_exponent.value);
  return c;
}

double steps_at_batch(const CriticalBatch& c, double batch_tokens) {
  return c.s_min_steps * (1.0 + c.b_noise_tokens / batch_tokens);
}

double tokens_at_batch(const CriticalBatch& c, double batch_tokens) {
  return c.s_min_steps * c.b_noise_tokens * (1.0 + batch_tokens / c.b_noise_tokens);
}

namespace {
double scale(LrScaling s, double x) {
  switch (s) {
    case LrScaling::Linear: return x;
    case LrScaling::Sqrt: return std::sqrt(x);
    case LrScaling::None: return 1.0;
  }
  return 1.0;
}
}  // namespace

double lr_at_batch(const LrRule& rule, double batch_seqs, double reference_seqs) {
  return rule.base * scale(rule.scaling, batch_seqs / reference_seqs);
}

double lr_ratio(LrScaling scaling, double batch_tokens, double reference_tokens,
                double b_noise_tokens) {
  return scale(scaling, batch_tokens / reference_tokens) * (1.0 + b_noise_tokens / batch_tokens) /
         (1.0 + b_noise_tokens / reference_tokens);
}

std::optional<double> lr_steps_factor(double r) {
  if (!(r > 0) || !(r < 2)) return std::nullopt;
  return 1.0 / (2.0 * r - r * r);
}

double effective_lr_ratio(double r, double reach) {
  if (!(r > 1) || !(reach > 0)) return r;
  return 1.0 + (r - 1.0) / reach;
}

double Penalty::at_batch(double batch_tokens, double b_noise_tokens) const {
  const double n = noise_factor.value_or(factor);
  if (!(batch_tokens + b_noise_tokens > 0)) return factor;
  const double bias = bias_factor && batch_tokens > 0 ? 1.0 + *bias_factor * b_noise_tokens / batch_tokens : 1.0;
  return bias * (factor * batch_tokens + n * b_noise_tokens) / (batch_tokens + b_noise_tokens);
}

Penalty Staleness::at_lag(double lag) const {
  Penalty p{1.0 + lag * per_step, std::nullopt, source};
  if (noise_per_step) p.noise_factor = 1.0 + lag * *noise_per_step;
  return p;
}

Penalty compression_penalty(const ConvergenceModel& m, const Compression& c) {
  if (c.method == CompressionMethod::None) return {};
  const bool sparse = sparse_compression(c.method);
  const CompressionPenalty* found = nullptr;
  for (const auto& p : m.compression)
    if (p.method == c.method && (!sparse || p.error_feedback == c.error_feedback)) found = &p;
  if (!found || found->points.empty())
    throw InputError(m.file, "penalties.compression",
                     "no penalty for compression method \"" + std::string(enum_name(c.method)) + "\"" +
                         (sparse ? (c.error_feedback ? " with" : " without") + std::string(" error feedback")
                                 : std::string()));
  const auto& pts = found->points;
  const double x = penalty_parameter(c);
  if (pts.size() == 1 || x <= pts.front().at) return pts.front().penalty;
  if (x >= pts.back().at) return pts.back().penalty;
  std::size_t i = 1;
  while (pts[i].at < x) ++i;
  const Penalty& a = pts[i - 1].penalty;
  const Penalty& b = pts[i].penalty;
  const double t = (std::log(x) - std::log(pts[i - 1].at)) / (std::log(pts[i].at) - std::log(pts[i - 1].at));
  Penalty out;
  out.factor = a.factor + t * (b.factor - a.factor);
  if (a.noise_factor || b.noise_factor) {
    const double na = a.noise_factor.value_or(a.factor), nb = b.noise_factor.value_or(b.factor);
    out.noise_factor = na + t * (nb - na);
  }
  if (a.bias_factor || b.bias_factor)
    out.bias_factor = a.bias_factor.value_or(0) + t * (b.bias_factor.value_or(0) - a.bias_factor.value_or(0));
  out.source = "interpolated between " + a.source + " and " + b.source;
  return out;
}

Penalties penalties_for(const ConvergenceModel& m, const Plan& plan, double batch_tokens,
                        double b_noise_tokens) {
  Penalties p;
  p.compression = compression_penalty(m, plan.compression).at_batch(batch_tokens, b_noise_tokens);
  const auto it = m.optimizer.find(plan.optimizer);
  if (it == m.optimizer.end())
    throw InputError(m.file, "penalties.optimizer",
                     "no penalty for optimizer \"" + std::string(enum_name(plan.optimizer)) + "\"");
  p.optimizer = it->second.at_batch(batch_tokens, b_noise_tokens);
  if (plan.schedule == Schedule::PipeDream)
    p.staleness_steps = static_cast<double>(plan.pp - 1);
  else if (plan.schedule == Schedule::PipeDream2BW)
    p.staleness_steps = plan.pp > 1 ? 1.0 : 0.0;
  // A parameter server with bounded staleness: up to ps_staleness versions more.
  if (plan.dp_topology == DpTopology::ParameterServer && plan.dp > 1)
    p.staleness_steps += static_cast<double>(plan.ps_staleness);
  p.staleness = m.staleness_per_step.at_lag(p.staleness_steps).at_batch(batch_tokens, b_noise_tokens);
  return p;
}

GoalEstimate estimate_goal(const ConvergenceModel& m, const std::optional<LrRule>& lr_override,
                           std::optional<double> goal_tokens, std::optional<double> goal_loss,
                           const Plan& plan, std::int64_t batch_seqs, std::int64_t seq_len) {
  if (goal_tokens.has_value() == goal_loss.has_value())
    throw Error("estimate_goal: needs exactly one of a token goal and a target loss");
  GoalEstimate g;
  g.batch_tokens = static_cast<double>(batch_seqs) * static_cast<double>(seq_len);
  // The critical batch sets the best learning rate and the penalties even
  // for a token goal.
  const CriticalBatch c = critical_batch_at(m, goal_loss ? *goal_loss : m.target_loss);
  g.penalties = penalties_for(m, plan, g.batch_tokens, c.b_noise_tokens);
  if (goal_loss) {
    g.critical = c;
    g.base_steps = steps_at_batch(c, g.batch_tokens);
  } else {
    g.base_steps = *goal_tokens / g.batch_tokens;
  }
  const std::optional<LrRule> rule = lr_override ? lr_override : m.lr;
  if (rule) {
    const double ref_seqs = static_cast<double>(rule->reference_batch.value_or(batch_seqs));
    g.lr = lr_at_batch(*rule, static_cast<double>(batch_seqs), ref_seqs);
    g.lr_ratio = lr_ratio(rule->scaling, g.batch_tokens, ref_seqs * static_cast<double>(seq_len),
                          c.b_noise_tokens);
    g.warmup_steps = rule->warmup_steps;
    if (const auto it = m.lr_reach.find(plan.optimizer); it != m.lr_reach.end()) g.lr_reach = it->second.value;
    g.lr_ratio_effective = effective_lr_ratio(g.lr_ratio, g.lr_reach);
    const auto f = lr_steps_factor(g.lr_ratio_effective);
    if (!f) {
      g.reachable = false;
      g.unreachable_reason = "the learning rate is " + num(g.lr_ratio) + " times the best one at this batch" +
                             (g.lr_reach != 1 ? ", " + num(g.lr_ratio_effective) + " as " +
                                                    std::string(enum_name(plan.optimizer)) + " takes it" : "") +
                             " (2 or more never converges)";
      return g;
    }
    g.lr_factor = *f;
  }
  const double steps = g.base_steps * g.lr_factor * g.penalties.total();
  if (!(steps < 1e18)) {
    g.reachable = false;
    g.unreachable_reason = "needs more than 1e18 steps";
    return g;
  }
  g.steps = static_cast<std::int64_t>(std::ceil(steps - 1e-9)) + g.warmup_steps;
  g.tokens = static_cast<double>(g.steps) * g.batch_tokens;
  return g;
}

std::optional<GoalEstimate> estimate_goal(const Scenario& s) {
  if (!s.goal) return std::nullopt;
  if (!s.convergence) throw Error("estimate_goal: a scenario with a goal needs a convergence model");
  return estimate_goal(*s.convergence, s.lr, s.goal->tokens, s.goal->target_loss, s.plan,
                       s.batch.global, s.model.seq_len);
}

std::optional<TimeToTrain> time_to_train(const Scenario& s, const GoalEstimate& g,
                                         double step_time_s) {
  if (!g.reachable) return std::nullopt;
  TimeToTrain t;
  t.seconds = static_cast<double>(g.steps) * step_time_s;
  t.gpu_hours = t.seconds * static_cast<double>(s.cluster.gpus()) / 3600.0;
  return t;
}

}  // namespace strata::strategies
