#pragma once
// Rendering of `strata simulate`: feasibility, peak memory with its
// breakdown by tag, per-stage peaks and host/NVMe bytes.
#include <string>

#include "report/format.hpp"
#include "strategies/memory.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

// JSON fields (a public contract, DESIGN.md): feasible, peak_memory_bytes,
// memory_breakdown_bytes, memory_per_stage, host_memory_bytes, nvme_bytes,
// infeasible_reason {pool, needs_bytes, has_bytes} when infeasible.
std::string render_simulation(const strategies::Scenario& sc,
                              const strategies::MemoryEstimate& mem, Format f);

}  // namespace strata::report
