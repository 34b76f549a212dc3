#pragma once
// Rendering of `strata simulate`: feasibility, peak memory with its
// breakdown by tag, per-stage peaks and host/NVMe bytes.
#include <string>

#include "report/format.hpp"
#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "lowering/stragglers.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

// JSON fields (a public contract, DESIGN.md): feasible, step_time_s,
// tokens_per_s_per_gpu, model_tflops_per_gpu, hardware_tflops_per_gpu, mfu,
// time_breakdown_s, bubble_fraction, peak_memory_bytes,
// memory_breakdown_bytes, memory_per_stage, host_memory_bytes, nvme_bytes,
// infeasible_reason {pool, needs_bytes, has_bytes} when infeasible, notes
// (strategies::plan_notes: what a plan's names amount to) when any;
// stage_slowdown (cluster.slow: each stage's factor) and stragglers
// {samples, seed, nominal_s, mean_s, p50_s, p90_s, p99_s, max_s,
// backup_replicas, with_backup {...}} (cluster.stragglers) when the
// cluster has them. `step` may be null (memory only).
std::string render_simulation(const strategies::Scenario& sc,
                              const strategies::MemoryEstimate& mem,
                              const strategies::StepPrediction* step, Format f,
                              const strategies::StragglerStats* stragglers = nullptr);

// What `strata simulate` runs on a scenario read (the plan required,
// app/scenarios.hpp) and prints: the step lowered per layer (or per chunk,
// the explorer's level) and replayed, memory from the replay (or the
// closed form), rendered in `format`; with `trace`, the step's
// Chrome/Perfetto trace written there (layer level only: InputError
// otherwise). Shared by the command line and the Python module.
struct SimulateOptions {
  bool analytical = false;  // closed-form memory instead of the replayed schedule
  bool chunk = false;       // --granularity chunk
  std::string trace;        // empty: none
  Format format = Format::Json;
};
std::string simulate(const strategies::Scenario& sc, const SimulateOptions& o);

}  // namespace strata::report
