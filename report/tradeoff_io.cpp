#include <nlohmann/json.hpp>

#include "report/svg.hpp"
#include "report/table.hpp"
#include "report/tradeoff.hpp"

namespace strata::report {

namespace {

using nlohmann::ordered_json;
using strategies::RematPolicy;

double seconds(const strategies::Tradeoff&, const strategies::TradeoffPoint& p) {
  return to_seconds(p.time);
}
double overhead(const strategies::Tradeoff& t, const strategies::TradeoffPoint& p) {
  return static_cast<double>(p.time) / static_cast<double>(t.no_savings) - 1;
}
std::string gib(Bytes b) { return fixed(to_GiB(b), 2) + " GiB"; }

}  // namespace

Table tradeoff_table(const strategies::Tradeoff& t) {
  Table tab;
  tab.columns = {"activations", "memory"};
  for (const auto& c : t.curves) tab.columns.emplace_back(enum_name(c.policy));
  tab.align.assign(tab.columns.size(), Align::Right);
  for (std::size_t b = 0; b < t.budgets.size(); ++b) {
    std::vector<std::string> row{gib(t.budgets[b]), gib(t.fixed_bytes + t.budgets[b])};
    for (const auto& c : t.curves) {
      const auto& p = c.best[b];
      row.push_back(p ? fixed(seconds(t, *p), 3) + " s +" + fixed(100 * overhead(t, *p), 1) + "%"
                      : "-");
    }
    tab.add_row(row);
  }
  return tab;
}

std::string render_tradeoff(const strategies::Tradeoff& t, Format f) {
  const Bytes none_peak = t.budgets.front();
  if (f == Format::Json) {
    ordered_json j;
    j["model"] = t.model;
    j["stages"] = t.stages;
    j["microbatches"] = t.microbatches;
    j["fixed_bytes"] = t.fixed_bytes;
    j["gpu_memory_bytes"] = t.gpu_bytes;
    j["optimizer_time_s"] = to_seconds(t.optimizer_time);
    j["framework_time_s"] = to_seconds(t.framework_time);
    j["no_savings"] = {{"step_time_s", to_seconds(t.no_savings)},
                       {"activation_bytes", none_peak}};
    ordered_json rows = ordered_json::array();
    for (std::size_t b = 0; b < t.budgets.size(); ++b) {
      ordered_json pol;
      for (const auto& c : t.curves) {
        const auto& p = c.best[b];
        pol[std::string(enum_name(c.policy))] =
            p ? ordered_json{{"step_time_s", seconds(t, *p)},
                             {"overhead", overhead(t, *p)},
                             {"activation_peak_bytes", p->peak},
                             {"peak_memory_bytes", t.fixed_bytes + p->peak},
                             {"setting", p->setting}}
              : ordered_json(nullptr);
      }
      rows.push_back({{"activation_budget_bytes", t.budgets[b]},
                      {"memory_budget_bytes", t.fixed_bytes + t.budgets[b]},
                      {"policies", pol}});
    }
    j["budgets"] = rows;
    return j.dump(2) + "\n";
  }
  Table tab;
  if (f == Format::Csv) {
    tab.columns = {"activation_budget_bytes", "memory_budget_bytes", "policy", "feasible",
                   "step_time_s", "overhead", "activation_peak_bytes", "peak_memory_bytes",
                   "setting"};
    for (std::size_t b = 0; b < t.budgets.size(); ++b)
      for (const auto& c : t.curves) {
        const auto& p = c.best[b];
        tab.add_row({std::to_string(t.budgets[b]), std::to_string(t.fixed_bytes + t.budgets[b]),
                     std::string(enum_name(c.policy)), p ? "true" : "false",
                     p ? fixed(seconds(t, *p), 6) : "", p ? fixed(overhead(t, *p), 6) : "",
                     p ? std::to_string(p->peak) : "",
                     p ? std::to_string(t.fixed_bytes + p->peak) : "", p ? p->setting : ""});
      }
    return to_csv(tab);
  }
  tab = tradeoff_table(t);
  std::string out;
  out += "model        " + printable(t.model) + " (" + printable(t.shape) + "), " + std::to_string(t.microbatches) +
         " microbatch(es) per step\n";
  out += "memory       " + gib(t.fixed_bytes) +
         " fixed (weights, gradients, optimizer state, runtime) + activations; GPU " +
         gib(t.gpu_bytes) + "\n";
  out += "no savings   step " + fixed(to_seconds(t.no_savings), 3) + " s, activations " +
         gib(none_peak) + "\n";
  out += "cells        step time and overhead of each policy's fastest schedule within the "
         "activation budget (- : none fits)\n\n";
  return out + to_text(tab);
}

std::string tradeoff_svg(const strategies::Tradeoff& t) {
  // Overheads beyond +100 % (the lowest budgets of revolve and optimal can
  // cost many times the step) would flatten the rest: left out, as the
  // description says; the table has them.
  constexpr double kMaxOverhead = 100;
  svg::Scatter s;
  s.title = "Step time against memory: " + t.model;
  s.desc = "For each recompute policy, the extra step time of its fastest schedule within each "
           "memory budget, from no savings (" + fixed(to_seconds(t.no_savings), 3) +
           " s a step) down to the least feasible budget; overheads above +100 % are not drawn.";
  s.x_label = "memory budget per GPU (GiB)";
  s.y_label = "extra step time over no savings (%)";
  for (std::size_t i = 0; i < t.curves.size(); ++i) {
    const auto& c = t.curves[i];
    svg::ScatterSeries ser{std::string(enum_name(c.policy)), svg::colour(i), {}, true};
    for (std::size_t b = 0; b < t.budgets.size(); ++b)
      if (c.best[b] && 100 * overhead(t, *c.best[b]) <= kMaxOverhead)
        ser.points.emplace_back(to_GiB(t.fixed_bytes + t.budgets[b]),
                                100 * overhead(t, *c.best[b]));
    s.series.push_back(std::move(ser));
  }
  s.x_limit = to_GiB(t.gpu_bytes);
  s.x_limit_label = "GPU memory";
  return svg::scatter(s);
}

}  // namespace strata::report
