#pragma once
// JSON renderings of fields `simulate` and `explore` share (report/*_io.cpp
// only: it needs nlohmann's full header).
#include <nlohmann/json.hpp>

#include "sim/task_graph.hpp"
#include "lowering/lower.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

// Tags printed, in order: every tag a GPU's bytes can carry (`other` only when
// non-zero).
inline constexpr sim::MemTag kPrintedTags[] = {
    sim::MemTag::Params,      sim::MemTag::Grads,       sim::MemTag::OptimizerStates,
    sim::MemTag::Activations, sim::MemTag::CommBuffers, sim::MemTag::Workspace,
    sim::MemTag::AllocatorReserve, sim::MemTag::Runtime, sim::MemTag::Other};

// A GPU's dense peaks {fp32, tf32, fp16, bf16, fp8}, and a node's links and
// capacities {gpus_per_node, intra_node_GBps, inter_node_GBps_per_gpu,
// pcie_GBps, host_memory_GiB, nvme_GBps, nvme_GiB}: as `describe` lists
// them and the explore manifest records them.
nlohmann::ordered_json tflops_json(const cost::PeakTflops& t);
nlohmann::ordered_json node_links_json(const cost::NodeSpec& n);

// {"params": bytes, …} in kPrintedTags order.
nlohmann::ordered_json tags_json(const sim::TagBytes& bytes);
// time_breakdown_s: compute, recompute, exposed_comm {dp, tp, pp, cp, ep,
// offload}, bubble, offload_stall, optimizer, in seconds.
nlohmann::ordered_json breakdown_json(const strategies::TimeBreakdown& b);

// With a goal (docs/time-to-train.md): time_to_train_s and gpu_hours (null
// when the goal is unreachable), steps_to_target (loss goals), and
// `training`: the goal, steps, tokens and every factor behind them.
void add_goal_fields(nlohmann::ordered_json& j, const strategies::Scenario& sc,
                     const strategies::GoalEstimate& g, double step_time_s);

}  // namespace strata::report
