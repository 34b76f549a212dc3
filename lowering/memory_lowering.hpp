#pragma once
// Per-GPU memory from the replayed step: the step's task graph
// (lower_step) carries every stage's buffers — static bytes live from the
// start, activations allocated and freed by the tasks that make and consume
// them, offloaded activations in the host pool — so each stage's peak comes
// out of the actual schedule, prefetch timing included.
#include "sim/engine.hpp"
#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_program.hpp"

namespace strata::strategies {

// estimate_memory(), with each stage's GPU bytes at its peak and its host
// activation bytes taken from the replayed timeline (`source` = "timeline").
MemoryEstimate simulate_memory(const Scenario& sc, const MemoryRules& rules = {});
// The same from a step already lowered and replayed (predict_step's).
MemoryEstimate memory_from_run(const Scenario& sc, const LoweredStep& low, const sim::RunResult& run,
                               const MemoryRules& rules = {});

// The same from each stage's peaks (a replayed step program's, either
// level's).
MemoryEstimate memory_from_peaks(const Scenario& sc, const LayerPlan& layers, std::span<const StageMemoryPeak> peaks,
                                 const MemoryRules& rules = {});

}  // namespace strata::strategies
