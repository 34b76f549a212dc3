#pragma once
// Pipeline splits weighed by the GPUs each stage runs on (plan
// pipeline_layout gpu_speed and gpu_memory), for clusters of node groups
// (cluster.groups): a stage on faster or larger GPUs takes more blocks.
#include <cstdint>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "strategies/plan.hpp"

namespace strata::strategies {

// Whether the layout weighs stages by their GPUs.
bool weighs_stages(PipelineLayout layout);

// Each pipeline stage's weight under the plan's layout: gpu_speed, the
// inverse of one transformer block's forward and backward time on the
// stage's slowest GPU (op by op, each GPU's bundled efficiency curves,
// costmodel/time_model.hpp); gpu_memory, the stage's smallest GPU's memory.
// `curves`: each group's calibration (Scenario::group_curves); null: each
// GPU's bundled curves.
std::vector<double> stage_weights(const Plan& plan, const Batch& batch, const cost::ModelSpec& model,
                                  const cost::ClusterSpec& cluster,
                                  const std::vector<cost::Calibration>* curves = nullptr);

// Blocks per chunk in proportion to the stages' weights: stage s takes
// round(w_s / Σw · blocks) blocks (largest remainders first, at least one
// per chunk), split evenly over its virtual chunks (chunk k runs on stage
// k mod pp; earlier chunks take the remainder). Empty when the plan has
// more chunks than blocks.
std::vector<std::int64_t> weighted_chunk_layers(const Plan& plan, std::int64_t blocks,
                                                const std::vector<double>& weights);

// For a plan whose layout weighs stages and has no stage_layers: sets
// stage_layers to the weighted split (what every reader of the plan's
// chunks then sees). Scenarios and space points call it after their plan
// is final; any other plan is left as it is.
void resolve_stage_layers(Plan& plan, const Batch& batch, const cost::ModelSpec& model,
                          const cost::ClusterSpec& cluster,
                          const std::vector<cost::Calibration>* curves = nullptr);

}  // namespace strata::strategies
