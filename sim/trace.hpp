#pragma once
// Export of a run: a Chrome trace-event file (opens in Perfetto and
// chrome://tracing) and a compact JSON summary. Both are deterministic: the
// same graph and result give identical bytes.
//
// Trace layout: resources and pools are grouped into processes by the part of
// their name before the first '.' ("r0.compute" and "r0.h2d" → process "r0";
// a pool named "r0" joins it). Each stream and copy engine is one track;
// worker pools and links get as many tracks ("lanes") as they have
// overlapping tasks; tasks on no resource go to process "unassigned". Tasks
// are complete ("X") events named by task id, with kind and label in args;
// each pool has a counter ("C") of live bytes by tag.
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "sim/engine.hpp"
#include "sim/task_graph.hpp"

namespace strata::sim {

// The whole trace as one JSON value (for small runs and tests).
nlohmann::json chrome_trace_json(const TaskGraph& graph, const RunResult& result);
// Streams the trace, one event per line, without holding it in memory.
void write_chrome_trace(std::ostream& out, const TaskGraph& graph, const RunResult& result);
// write_chrome_trace into a string.
std::string chrome_trace(const TaskGraph& graph, const RunResult& result);

// {"makespan_ns", "tasks", "events", "fits", "resources": [{name, kind, busy_ns,
//  utilization, tasks, bytes}], "pools": [{name, capacity_bytes, peak_bytes,
//  peak_time_ns, peak_by_tag{tag: bytes}, end_live_bytes, bytes_short}],
//  "oom": null | {task, pool, buffer, time_ns, capacity_bytes, needed_bytes,
//  bytes_short}}
nlohmann::json summary_json(const TaskGraph& graph, const RunResult& result);
void write_summary(std::ostream& out, const TaskGraph& graph, const RunResult& result);

}  // namespace strata::sim
