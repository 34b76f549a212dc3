#pragma once
// `strata tradeoff SCENARIO` (docs/remat.md): step time against memory for
// each recompute policy, as a table, JSON, CSV and an SVG chart.
#include <string>

#include "report/format.hpp"
#include "report/table.hpp"
#include "explorer/tradeoff.hpp"

namespace strata::report {

// Table: one row per activation budget, one column per policy (step time and
// overhead over no savings). JSON: {"model", "stages", "microbatches",
// "fixed_bytes", "gpu_memory_bytes", "optimizer_time_s", "framework_time_s", "no_savings":
// {"step_time_s", "activation_bytes"}, "budgets": [{"activation_budget_bytes",
// "memory_budget_bytes", "policies": {"none": {"step_time_s", "overhead",
// "activation_peak_bytes", "peak_memory_bytes", "setting"} or null, …}}]}.
// CSV: one row per budget and policy.
std::string render_tradeoff(const strategies::Tradeoff& t, Format f);
// The table's rows (the text rendering's, and the report's).
Table tradeoff_table(const strategies::Tradeoff& t);

// The chart: extra step time over no savings (%, up to +100 %) against the
// memory budget (fixed bytes + activation budget, GiB), one curve per
// policy, the GPU's memory as a vertical line.
std::string tradeoff_svg(const strategies::Tradeoff& t);

}  // namespace strata::report
