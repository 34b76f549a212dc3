#include "lowering/coarse.hpp"

#include "lowering/memory_lowering.hpp"
#include "lowering/steady_state.hpp"
#include "lowering/step_program.hpp"

namespace strata::strategies {

namespace {
ChunkPrediction replayed(const Scenario& sc, const StepCosts& costs, Granularity g, const ReplayOptions& o) {
  ProgramWorkspace own;
  ProgramWorkspace& w = o.workspace ? *o.workspace : own;
  if (o.steady_state)
    if (auto steady = predict_steady(sc, costs, g, o, w)) return std::move(*steady);
  build_step_program(sc, costs, g, o.layers, o.schedule, w);
  const StepProgram& p = w.program;
  require_countable_step(sc, serial_ns(p), p.tasks.size());
  replay(p, w);
  return {prediction(sc, p, w.run, o.every_stage), memory_from_peaks(sc, p.layers, w.run.stages), p.exact};
}
}  // namespace

ChunkPrediction predict_chunks(const Scenario& sc, const StepCosts& costs, const ReplayOptions& o) {
  return replayed(sc, costs, Granularity::Chunk, o);
}

ChunkPrediction predict_replayed(const Scenario& sc, const StepCosts& costs, const ReplayOptions& o) {
  return replayed(sc, costs, Granularity::Layer, o);
}

StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs, const PipelineSchedule* schedule) {
  return predict_chunks(sc, costs, {.schedule = schedule}).step;
}

}  // namespace strata::strategies
