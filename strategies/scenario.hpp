#pragma once
// A scenario: one model on one cluster with a batch and a plan, optionally a
// training goal and a calibration file (DESIGN.md, docs/input-format.md).
#include <optional>
#include <string>

#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "strategies/plan.hpp"

namespace strata::strategies {

struct Goal {
  std::optional<double> tokens;
  std::optional<double> target_loss;
};

struct Scenario {
  std::string file;  // where it was read from ("" when built in code)
  cost::ModelSpec model;
  cost::ClusterSpec cluster;
  Batch batch;
  Plan plan;
  std::optional<Goal> goal;
  std::optional<std::string> calibration;  // resolved path
};

// Reads and validates a scenario file. Throws InputError naming the file, the
// JSON path and the rule.
Scenario load_scenario(const std::string& path);
// The same from JSON text (`source` names it in errors; relative paths
// resolve against `base_dir`).
Scenario parse_scenario(std::string_view text, const std::string& source,
                        const std::string& base_dir = "");

// Whether a JSON file holds a scenario (it has "cluster", "batch" or "plan")
// rather than a model. Throws InputError when it cannot be read or parsed.
bool is_scenario_file(const std::string& path);

}  // namespace strata::strategies
