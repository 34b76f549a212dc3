// report::simulate: the work of `strata simulate` (report/simulate.hpp).
#include "report/files.hpp"
#include "report/simulate.hpp"
#include "sim/error.hpp"
#include "sim/trace.hpp"
#include "lowering/coarse.hpp"
#include "lowering/memory_lowering.hpp"
#include "lowering/step_costs.hpp"

namespace strata::report {

namespace {

// cluster.stragglers' distribution over the layer-level program.
std::optional<strategies::StragglerStats> stragglers(const strategies::Scenario& sc) {
  if (!sc.cluster.stragglers) return std::nullopt;
  const strategies::ModelStepCosts costs(sc);
  auto p = strategies::build_step_program(sc, costs, strategies::Granularity::Layer);
  return strategies::straggler_distribution(sc, p);
}

}  // namespace

std::string simulate(const strategies::Scenario& sc, const SimulateOptions& o) {
  if (o.chunk && !o.trace.empty())
    throw InputError("--trace", "", "needs --granularity layer (the chunk level builds no task graph)");
  const auto st = stragglers(sc);
  if (o.chunk) {
    const strategies::ModelStepCosts costs(sc);
    const auto pr = strategies::predict_chunks(sc, costs);
    return render_simulation(sc, o.analytical ? strategies::estimate_memory(sc) : pr.memory, &pr.step, o.format,
                             st ? &*st : nullptr);
  }
  sim::RunResult run;
  strategies::LoweredStep lowered;
  const auto step = strategies::predict_step(sc, &run, &lowered);
  const auto mem = o.analytical ? strategies::estimate_memory(sc) : strategies::memory_from_run(sc, lowered, run);
  std::string out = render_simulation(sc, mem, &step, o.format, st ? &*st : nullptr);
  if (!o.trace.empty()) write_file_atomically(o.trace, sim::chrome_trace(lowered.graph, run));
  return out;
}

}  // namespace strata::report
