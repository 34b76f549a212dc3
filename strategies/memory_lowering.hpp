#pragma once
// The memory side of a training step lowered into task graphs: one graph per
// pipeline stage (its representative rank), whose compute tasks follow the
// pipeline schedule and allocate and free the activation buffers of the
// recompute policy, with the stage's static bytes (weights, gradients,
// optimizer state, communication buffers, workspace, runtime) live from the
// start. Replaying it gives each stage's peak from the actual schedule.
#include "sim/task_graph.hpp"
#include "strategies/memory.hpp"

namespace strata::strategies {

// Stage `stage`'s graph; `statics` is that stage's analytical estimate, whose
// non-activation bytes become buffers live from the start.
sim::TaskGraph lower_stage_memory(const Scenario& sc, int stage, const StageMemory& statics);

// estimate_memory(), with each stage's activations and peak taken from the
// replayed timeline instead of the closed forms (`source` = "timeline").
// Plans the lowering does not cover yet (activation offload, whose copies need
// the time model) keep the analytical numbers (`source` = "analytical").
MemoryEstimate simulate_memory(const Scenario& sc, const MemoryRules& rules = {});

}  // namespace strata::strategies
