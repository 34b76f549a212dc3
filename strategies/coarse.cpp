#include "strategies/coarse.hpp"

#include "strategies/memory_lowering.hpp"
#include "strategies/step_program.hpp"

namespace strata::strategies {

ChunkPrediction predict_chunks(const Scenario& sc, const StepCosts& costs, const PipelineSchedule* schedule,
                               const LayerPlan* layers) {
  const StepProgram p = build_step_program(sc, costs, Granularity::Chunk, layers, schedule);
  require_countable_step(sc, serial_ns(p), p.tasks.size());
  const ProgramRun run = replay(p);
  return {prediction(sc, p, run), memory_from_peaks(sc, p.layers, run.stages)};
}

StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs, const PipelineSchedule* schedule) {
  return predict_chunks(sc, costs, schedule).step;
}

}  // namespace strata::strategies
