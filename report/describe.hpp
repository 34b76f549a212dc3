#pragma once
// Renderings of presets (`strata models|gpus|clusters`) and of a model's op
// chain (`strata describe`).
#include <optional>
#include <string>
#include <vector>

#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "costmodel/ops.hpp"
#include "report/format.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

std::string list_models(const std::vector<cost::ModelSpec>& models, Format f);
std::string list_gpus(const std::vector<cost::GpuSpec>& gpus, Format f);
std::string list_clusters(const std::vector<cost::ClusterSpec>& clusters, Format f);
// The bundled software stacks, one row per setting with its source.
std::string list_stacks(const std::vector<strategies::Stack>& stacks, Format f);

// The whole model (no parallelism) for one microbatch of `options.micro_batch`
// sequences. JSON: {"model", "params", "flops_per_token", "tokens", "layers":
// [{"name", "ops": [{"op", "params", "fwd_flops", "bwd_flops",
// "saved_bytes"}]}]}; `scenario`, when given, is summarised too.
std::string describe(const cost::ModelSpec& model, const cost::ExpandOptions& options,
                     const strategies::Scenario* scenario, Format f);

}  // namespace strata::report
