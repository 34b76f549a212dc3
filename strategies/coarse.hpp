#pragma once
// The coarse level of the step simulation (DESIGN.md "Granularity"): each
// stage runs its pipeline schedule as one compute task per (model chunk,
// microbatch, pass) — the sum of the chunk's layer passes, their blocking
// tensor/context/expert-parallel communication and the framework overhead —
// plus its point-to-point sends, and a tail per stage (data-parallel
// buckets, compression, the optimizer step, the distributed optimizer's
// all-gather, ZeRO-Offload's copies) placed on the same in-order streams as
// the layer-level lowering (lower.hpp). The graph has no shared links and no
// memory, so it is timed by a direct recurrence: a task starts when its
// stream is free and what it waits for has ended, exactly as the engine
// would replay it; no task graph is built and no string is formatted.
//
// Where nothing inside a microbatch needs its own events the coarse level
// is exact: it gives the layer-level step time to the nanosecond (tested).
// Data-parallel buckets need per-layer events only after each chunk's last
// backward, and that backward's layer end times are summed exactly. ZeRO-3's
// per-layer gathers and reduce-scatters, weight offload and activation
// offload/prefetch are folded in per layer as max(compute, transfer), an
// approximation whose agreement with the layer level docs/performance.md
// reports.
#include "strategies/lower.hpp"
#include "strategies/schedule.hpp"

namespace strata::strategies {

// True when the coarse level reproduces the layer level exactly.
bool coarse_is_exact(const Plan& plan);

// Step time and its per-stage breakdown at chunk granularity. `tasks` counts
// the coarse tasks timed.
// `schedule`, when given, is make_schedule's for the plan (the explorer
// reuses one across the plans that share it).
StepPrediction predict_step_coarse(const Scenario& sc, const StepCosts& costs,
                                   const PipelineSchedule* schedule = nullptr);

}  // namespace strata::strategies
