// strata tradeoff SCENARIO: step time against memory per recompute policy.
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/files.hpp"
#include "report/tradeoff.hpp"
#include "explorer/tradeoff.hpp"

namespace strata::app {

namespace {

struct TradeoffArgs {
  std::string scenario;
  std::string svg;  // the chart's file; empty: none
  strategies::TradeoffOptions options;
  report::Format format = report::Format::Table;
  bool quiet = false;
};

std::string tradeoff(const TradeoffArgs& a) {
  if (!a.svg.empty()) {  // checked before the search, which can take seconds
    report::require_output_apart(a.svg, "--svg", {a.scenario});
    report::check_output_target(a.svg);
  }
  const auto sc = load_scenario_file(a.scenario);
  report::require_output_apart(a.svg, "--svg", scenario_inputs(sc));
  // The sweep can take seconds (bounded near 10 s): a line after 2 s.
  PhaseLine line("tradeoff", a.quiet, 2.0);
  auto options = a.options;
  options.progress = [&line](const std::string& phase, std::uint64_t done, std::uint64_t total) {
    line(phase, done, total);
  };
  const auto t = strategies::tradeoff(sc, options);
  line.finish();
  std::string out = report::render_tradeoff(t, a.format);
  if (!a.svg.empty()) report::write_file_atomically(a.svg, report::tradeoff_svg(t));
  return out;
}

}  // namespace

Command add_tradeoff(CLI::App& app) {
  auto a = std::make_shared<TradeoffArgs>();
  Subcommand cmd(
      app, "tradeoff", "Step time against memory for each recompute policy (none, every_k, sqrt, "
                  "revolve, optimal; for pipelines the plan's own steps with none, selective, "
                  "full, every_k, sqrt, optimal), from no savings down to the least feasible budget");
  cmd.option("SCENARIO", a->scenario,
             "A scenario JSON (a layer-chain model, or a transformer: one chain per GPU with pp = 1, the "
             "plan's steps with pp > 1)")
      .required();
  cmd.option("--svg", a->svg, "Write the chart to FILE").type_name("FILE");
  cmd.option("--budgets", a->options.budgets, "Memory budgets in the sweep (default 16)").range(2, 1000);
  cmd.option("--levels", a->options.levels, "Memory levels of the optimal solver's dynamic programme (default 100)")
      .range(1, 100000);
  add_format_option(cmd, a->format);
  cmd.flag("--quiet", a->quiet, "No progress lines on standard error");
  return {cmd.cli(), [a] { return tradeoff(*a); }};
}

}  // namespace strata::app
