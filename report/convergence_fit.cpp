#include "report/convergence_fit.hpp"

#include <cmath>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "report/svg.hpp"
#include "sim/json_reader.hpp"
#include "report/table.hpp"
#include "strategies/convergence_io.hpp"
#include "sim/text.hpp"

namespace strata::report {

namespace {

using nlohmann::ordered_json;

ordered_json opt(const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); }

std::string pct(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fixed(100 * *v, 1) + " %" : "-";
}

std::string g3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Each setting's penalty as the fit used it (1 for the baseline); nothing
// when none was fitted.
std::optional<strategies::Penalty> penalty_of(const strategies::FitRecord& r, const strategies::FitSetting& s) {
  if (s.baseline()) return strategies::Penalty{};
  for (const auto& [name, p] : r.outcome.penalties)
    if (name == s.name) return p;
  return std::nullopt;
}

}  // namespace

std::string fitted_convergence_json(const strategies::FitRecord& r) {
  ordered_json j = ordered_json::parse(strategies::convergence_json(r.outcome.model));
  const auto& in = r.input;
  const auto& out = r.outcome;
  ordered_json fit;
  fit["scenario"] = sim::utf8_escaped(r.scenario);
  fit["data"] = sim::utf8_escaped(r.data);
  fit["entropy_rate"] = r.entropy_rate;
  fit["held_out_sequences"] = r.eval_sequences;
  fit["held_out_best_loss"] = in.loss_floor;
  fit["seq_len"] = in.seq_len;
  fit["target_losses"] = in.target_losses;
  fit["held_out_batches"] = in.held_out;
  ordered_json settings = ordered_json::array();
  for (const auto& s : in.settings) settings.push_back(s.name);
  fit["settings"] = settings;
  fit["skipped"] = r.skipped;
  fit["held_out_error"] = {{"max", opt(out.held_out_max_error)}, {"median", opt(out.held_out_median_error)}};
  ordered_json per_target = ordered_json::array();
  for (std::size_t k = 0; k < out.per_target.size(); ++k)
    per_target.push_back({{"target_loss", in.target_losses[k]},
                          {"S_min_steps", out.per_target[k].s_min_steps},
                          {"B_noise_tokens", out.per_target[k].b_noise_tokens}});
  fit["per_target"] = per_target;
  ordered_json points = ordered_json::array();
  for (const auto& p : out.points)
    points.push_back({{"setting", p.setting},
                      {"batch", p.batch},
                      {"lr", p.lr},
                      {"held_out", p.held_out},
                      {"runs", p.runs},
                      {"reached", p.reached},
                      {"mean_steps", opt(p.mean)},
                      {"min_steps", opt(p.min)},
                      {"max_steps", opt(p.max)},
                      {"predicted_steps", std::isfinite(p.predicted) ? ordered_json(p.predicted) : ordered_json(nullptr)},
                      {"error", p.error && std::isfinite(*p.error) ? ordered_json(*p.error) : ordered_json(nullptr)}});
  fit["points"] = points;
  fit["notes"] = out.notes;
  j["fit"] = fit;
  ordered_json runs = ordered_json::array();
  for (const auto& run : in.runs) {
    ordered_json steps = ordered_json::array();
    for (const auto& s : run.steps) steps.push_back(opt(s));
    runs.push_back({{"setting", run.setting},
                    {"batch", run.batch},
                    {"lr", run.lr},
                    {"seed", run.seed},
                    {"cap", run.cap},
                    {"steps", steps}});
  }
  j["measurements"] = runs;
  return j.dump(2) + "\n";
}

strategies::FitRecord load_fit_record(const std::string& path) {
  const auto j = load_json_file(path);
  const JsonReader r(j, path);
  if (!r.is_object()) r.fail("a fitted convergence file must be a JSON object");
  strategies::FitRecord rec;
  auto& in = rec.input;
  const auto fit = r.at("fit");
  fit.allow({"held_out_error", "per_target", "points", "notes"});
  rec.scenario = fit.at("scenario").as_string();
  rec.data = fit.at("data").as_string();
  rec.entropy_rate = fit.at("entropy_rate").as_number(0, 1e6);
  rec.eval_sequences = fit.at("held_out_sequences").as_int(1, INT64_MAX);
  in.loss_floor = fit.at("held_out_best_loss").as_number(0, 1e6);
  in.seq_len = fit.at("seq_len").as_int(1, INT64_MAX);
  for (const auto& t : fit.at("target_losses").elements()) in.target_losses.push_back(t.as_number(1e-9, 1e6));
  if (in.target_losses.empty()) fit.fail_at("target_losses", "needs at least one target");
  for (const auto& b : fit.at("held_out_batches").elements()) in.held_out.push_back(b.as_int(1, INT64_MAX));
  for (const auto& s : fit.at("settings").elements()) in.settings.push_back(strategies::parse_fit_setting(s.as_string(), path));
  for (const auto& s : fit.at("skipped").elements()) rec.skipped.push_back(s.as_string());
  fit.reject_unknown_keys();
  for (const auto& m : r.at("measurements").elements()) {
    strategies::FitRun run;
    run.setting = m.at("setting").as_string();
    run.batch = m.at("batch").as_int(1, INT64_MAX);
    run.lr = m.at("lr").as_number(0, 1e6);
    run.seed = static_cast<std::uint64_t>(m.at("seed").as_int(0, INT64_MAX));
    run.cap = m.at("cap").as_int(0, INT64_MAX);
    for (const auto& st : m.at("steps").elements())
      run.steps.push_back(st.is_null() ? std::nullopt : std::optional<double>(st.as_number(0, 1e18)));
    if (run.steps.size() != in.target_losses.size())
      m.fail_at("steps", "needs one entry per target loss (" + std::to_string(in.target_losses.size()) + ")");
    m.reject_unknown_keys();
    in.runs.push_back(std::move(run));
  }
  return rec;
}

std::string render_fit(const strategies::FitRecord& r, Format f, bool markdown) {
  const auto& in = r.input;
  const auto& out = r.outcome;
  const auto& m = out.model;
  Table t;
  t.columns = {"setting", "batch", "lr", "reached", "steps (mean)", "min-max", "predicted", "error", "held out"};
  t.align = {Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right,
             Align::Right, Align::Right, Align::Left};
  for (const auto& p : out.points) {
    const bool csv = f == Format::Csv;
    auto v = [&](const std::optional<double>& x) {
      return x ? (csv ? ordered_json(*x).dump() : fixed(*x, 1)) : std::string(csv ? "" : "-");
    };
    t.add_row({p.setting, std::to_string(p.batch), g3(p.lr),
               std::to_string(p.reached) + "/" + std::to_string(p.runs), v(p.mean),
               p.min ? v(p.min) + (csv ? ";" : "-") + v(p.max) : v(p.min),
               std::isfinite(p.predicted) ? (csv ? ordered_json(p.predicted).dump() : fixed(p.predicted, 1)) : "-",
               csv ? (p.error ? ordered_json(*p.error).dump() : "") : pct(p.error), p.held_out ? "yes" : ""});
  }
  if (f == Format::Csv) return to_csv(t);
  const double seq = static_cast<double>(in.seq_len);
  std::string s;
  s += "fit-convergence: " + r.scenario + ", " + r.data + "\n";
  s += "best held-out loss " + fixed(in.loss_floor, 4) + " nats (entropy rate " + fixed(r.entropy_rate, 4) +
       "); target loss " + fixed(m.target_loss, 4) + "\n\n";
  s += markdown ? to_markdown(t) : to_text(t);
  s += "\nS_min " + fixed(m.s_min_steps.value, 1) + " steps, B_noise " + g3(m.b_noise_tokens.value) +
       " tokens (" + fixed(m.b_noise_tokens.value / seq, 1) + " sequences), E_min " +
       g3(m.s_min_steps.value * m.b_noise_tokens.value) + " tokens\n";
  if (m.loss_scaling)
    s += "loss scaling: S_min ~ (L - " + fixed(m.loss_scaling->loss_floor.value, 4) + ")^-" +
         g3(m.loss_scaling->s_min_exponent.value) + ", B_noise ~ L^-" + g3(m.loss_scaling->b_noise_exponent.value) +
         " (fits at " + std::to_string(out.per_target.size()) + " target losses)\n";
  for (std::size_t i = 1; i < in.settings.size(); ++i) {
    const auto p = penalty_of(r, in.settings[i]);
    s += "penalty " + in.settings[i].name + ": ";
    if (!p)
      s += "not fitted";
    else if (p->noise_factor)
      s += "x" + fixed(p->factor, 3) + " on S_min, x" + fixed(*p->noise_factor, 3) + " on E_min" +
           (p->bias_factor ? ", x(1 + " + g3(*p->bias_factor) + " B_noise/B) for its bias" : std::string());
    else
      s += "x" + fixed(p->factor, 3);
    s += "\n";
  }
  std::size_t held = 0;
  for (const auto& p : out.points)
    if (p.held_out && p.error) ++held;
  s += "held-out error: max " + pct(out.held_out_max_error) + ", median " + pct(out.held_out_median_error) +
       " over " + std::to_string(held) + " held-out points\n";
  for (const auto& n : out.notes) s += "note: " + n + "\n";
  for (const auto& k : r.skipped) s += "skipped: " + k + "\n";
  return s;
}

std::string fit_plot_svg(const strategies::FitRecord& r) {
  const auto& in = r.input;
  const auto& m = r.outcome.model;
  const double seq = static_cast<double>(in.seq_len);
  svg::Scatter sc;
  sc.title = "Steps to a loss of " + fixed(m.target_loss, 3) + " against the global batch";
  sc.desc = "Dots: measured steps to the target loss of each run (" + r.data +
            "); lines: the fitted S(B) = S_min (1 + B_noise/B), and S_min (factor + noise_factor B_noise/B) for "
            "each setting (times (1 + bias_factor B_noise/B) for a biased compressor without error feedback).";
  sc.x_label = "global batch (tokens)";
  sc.y_label = "steps to the target";
  sc.log_x = true;
  sc.log_y = true;
  sc.noun = "runs";
  double lo = INFINITY, hi = 0;
  for (const auto& p : r.outcome.points) {
    lo = std::min(lo, static_cast<double>(p.batch) * seq);
    hi = std::max(hi, static_cast<double>(p.batch) * seq);
  }
  for (std::size_t i = 0; i < in.settings.size(); ++i) {
    const auto& s = in.settings[i];
    svg::ScatterSeries dots{s.baseline() ? "none (baseline)" : s.name, svg::colour(i), {}};
    for (const auto& run : in.runs) {
      if (run.setting != s.name || run.steps.empty() || !run.steps[0]) continue;
      // The baseline at its chosen rate only.
      bool used = false;
      for (const auto& p : r.outcome.points)
        used = used || (p.setting == s.name && p.batch == run.batch && p.lr == run.lr);
      if (used) dots.points.push_back({static_cast<double>(run.batch) * seq, *run.steps[0]});
    }
    sc.series.push_back(dots);
    const auto pen = penalty_of(r, s);
    if (!pen || !(lo < hi)) continue;
    svg::ScatterSeries line{dots.label + ": fitted", svg::colour(i), {}, true, false};
    const strategies::CriticalBatch c{m.s_min_steps.value, m.b_noise_tokens.value};
    for (int k = 0; k <= 40; ++k) {
      const double b = lo * std::pow(hi / lo, k / 40.0);
      line.points.push_back({b, pen->at_batch(b, c.b_noise_tokens) * strategies::steps_at_batch(c, b)});
    }
    sc.series.push_back(line);
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg::scatter(sc) + "\n";
}

}  // namespace strata::report
