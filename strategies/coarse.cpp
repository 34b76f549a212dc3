#include "strategies/coarse.hpp"

#include "strategies/memory_lowering.hpp"
#include "strategies/step_program.hpp"

namespace strata::strategies {

namespace {
ChunkPrediction replayed(const Scenario& sc, const StepProgram& p) {
  require_countable_step(sc, serial_ns(p), p.tasks.size());
  const ProgramRun run = replay(p);
  return {prediction(sc, p, run), memory_from_peaks(sc, p.layers, run.stages), p.exact};
}
}  // namespace

ChunkPrediction predict_chunks(const Scenario& sc, const StepCosts& costs, const PipelineSchedule* schedule,
                               const LayerPlan* layers) {
  return replayed(sc, build_step_program(sc, costs, Granularity::Chunk, layers, schedule));
}

ChunkPrediction predict_replayed(const Scenario& sc, const StepCosts& costs, const LayerPlan* layers) {
  return replayed(sc, build_step_program(sc, costs, Granularity::Layer, layers));
}

StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs, const PipelineSchedule* schedule) {
  return predict_chunks(sc, costs, schedule).step;
}

}  // namespace strata::strategies
