// strata simulate SCENARIO: the step's time and memory, predicted.
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/files.hpp"
#include "report/simulate.hpp"

namespace strata::app {

namespace {

struct SimulateArgs {
  std::string scenario;
  bool analytical = false;        // closed-form memory instead of the replayed schedule
  std::string trace;              // Chrome/Perfetto trace file; empty: none
  std::string granularity = "layer";  // layer | chunk
  report::Format format = report::Format::Table;
};

std::string simulate(const SimulateArgs& a) {
  // The trace's path is checked before any work: not the scenario read, a path the writer takes.
  if (!a.trace.empty()) {
    report::require_output_apart(a.trace, "--trace", {a.scenario});
    report::check_output_target(a.trace);
  }
  const auto sc = load_plan_scenario(a.scenario, "simulate", /*chain_models=*/true);
  // Nor a file the scenario names (its model, cluster, stack, convergence
  // model, calibration).
  report::require_output_apart(a.trace, "--trace", scenario_inputs(sc));
  return report::simulate(sc, {.analytical = a.analytical,
                               .chunk = a.granularity == "chunk",
                               .trace = a.trace,
                               .format = a.format});
}

}  // namespace

Command add_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  Subcommand cmd(app, "simulate", "Predict per-GPU memory (feasibility, peak, breakdown by tag and stage)");
  cmd.option("SCENARIO", a->scenario, "A scenario JSON").required();
  cmd.flag("--analytical", a->analytical, "Use the closed-form memory model instead of replaying the schedule");
  cmd.option("--trace", a->trace, "Write the step's Chrome/Perfetto trace to FILE").type_name("FILE");
  cmd.option("--granularity", a->granularity,
             "layer: the step's task graph, per layer (default); chunk: the explorer's "
             "level, one task per chunk pass (the same figures; with ZeRO-3 or offload, "
             "bounds: never slower, never more memory)")
      .one_of({"layer", "chunk"});
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return simulate(*a); }};
}

}  // namespace strata::app
