#pragma once
// A scenario: one model on one cluster with a batch and a plan, optionally a
// training goal and a calibration file (DESIGN.md, docs/input-format.md).
#include <optional>
#include <string>

#include "costmodel/hardware.hpp"
#include "costmodel/model.hpp"
#include "strategies/plan.hpp"
#include "strategies/space.hpp"

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
  // The space `strata explore` searches; `plan` and `batch` are then the
  // template for the axes it does not list.
  std::optional<Space> space;
};

// Reads and validates a scenario file. With a `space`, the plan is a
// template: it is validated point by point when explored, and by
// require_valid_plan before it is simulated on its own. Throws InputError naming the file, the
// JSON path and the rule.
Scenario load_scenario(const std::string& path);
// The same from JSON text (`source` names it in errors; relative paths
// resolve against `base_dir`).
Scenario parse_scenario(std::string_view text, const std::string& source,
                        const std::string& base_dir = "");

// Whether a JSON file holds a scenario (it has "cluster", "batch" or "plan")
// rather than a model. Throws InputError when it cannot be read or parsed.
bool is_scenario_file(const std::string& path);

// Throws InputError (file, JSON path, rule) for the first validity rule the
// scenario's plan breaks (validate.hpp).
void require_valid_plan(const Scenario& s);

// Throws InputError naming the scenario's model when it is a layer chain:
// `command` (simulate, explore, run, …) lowers transformers only; chains go
// to `strata tradeoff` and `strata describe`.
void require_transformer(const Scenario& s, const std::string& command);

}  // namespace strata::strategies
