#pragma once
// Rendering of `strata simulate`: feasibility, peak memory with its
// breakdown by tag, per-stage peaks and host/NVMe bytes.
#include <string>

#include "report/format.hpp"
#include "strategies/lower.hpp"
#include "strategies/memory.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

// JSON fields (a public contract, DESIGN.md): feasible, step_time_s,
// tokens_per_s_per_gpu, model_tflops_per_gpu, hardware_tflops_per_gpu, mfu,
// time_breakdown_s, bubble_fraction, peak_memory_bytes,
// memory_breakdown_bytes, memory_per_stage, host_memory_bytes, nvme_bytes,
// infeasible_reason {pool, needs_bytes, has_bytes} when infeasible, notes
// (strategies::plan_notes: what a plan's names amount to) when any. `step`
// may be null (memory only).
std::string render_simulation(const strategies::Scenario& sc,
                              const strategies::MemoryEstimate& mem,
                              const strategies::StepPrediction* step, Format f);

}  // namespace strata::report
