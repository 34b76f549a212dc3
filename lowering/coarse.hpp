#pragma once
// The chunk level of the step simulation (DESIGN.md "Granularity"): the step
// program (step_program.hpp) at Chunk granularity — a model chunk's pass over
// one microbatch as one task wherever no other task waits inside it — timed
// and its memory swept by `replay`, without a task graph or an event queue.
// Both levels are the same program, so they agree on every plan: step time
// to the nanosecond, each stage's peak memory and its breakdown to the byte
// (tested over sampled auto spaces).
#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "lowering/schedule.hpp"
#include "lowering/step_program.hpp"

namespace strata::strategies {

struct ChunkPrediction {
  StepPrediction step;
  MemoryEstimate memory;  // the replayed timeline's (source "timeline")
  bool exact = true;      // false: some pass folded (StepProgram::exact)
};

struct ReplayOptions {
  // make_schedule's schedule for the plan (the explorer reuses one across
  // the plans that share it).
  const PipelineSchedule* schedule = nullptr;
  const LayerPlan* layers = nullptr;  // replaces what plan_layers decides
  // False: only the critical stage is attributed (step.per_stage empty),
  // what the explorer records.
  bool every_stage = true;
  ProgramWorkspace* workspace = nullptr;  // storage reused from plan to plan
  // Long steps from two short programs where the pipeline's steady state
  // provably repeats (steady_state.hpp); the same figures as the whole
  // program's replay. False: always the whole program.
  bool steady_state = true;
};

// Step time, its per-stage breakdown and the memory timeline's peaks at chunk
// granularity.
ChunkPrediction predict_chunks(const Scenario& sc, const StepCosts& costs, const ReplayOptions& o = {});

// The layer-level program replayed (no task graph, no engine): the layer
// level's figures exactly.
ChunkPrediction predict_replayed(const Scenario& sc, const StepCosts& costs, const ReplayOptions& o = {});

// predict_chunks(...).step.
StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs,
                                   const PipelineSchedule* schedule = nullptr);

}  // namespace strata::strategies
