#pragma once
// Reading and writing convergence files (configs/convergence/*.json,
// `strata fit-convergence`'s output) and a scenario's "convergence" and "lr"
// keys (docs/input-format.md). Errors are InputErrors naming the file, the
// JSON path and the rule.
#include <string>
#include <string_view>

#include "sim/json_reader.hpp"
#include "strategies/convergence.hpp"

namespace strata::strategies {

// A convergence file; every required key present.
ConvergenceModel load_convergence_file(const std::string& path);
ConvergenceModel parse_convergence(std::string_view text, const std::string& source);
// A bundled convergence file by name ("default": configs/convergence/default.json).
ConvergenceModel bundled_convergence(std::string_view name = "default");

// A scenario's "convergence": a bundled name or a file path (relative to
// `base_dir` first), or an object {"file": NAME_OR_PATH, …} whose other keys
// override the file's (the bundled default without "file").
ConvergenceModel read_scenario_convergence(const JsonReader& r, const std::string& base_dir);
// A scenario's "lr": {"base", "scaling", "warmup_steps", "reference_batch"}.
LrRule read_lr_rule(const JsonReader& r);

// The model as a convergence file (keys in the documented order, every value
// with its source); `parse_convergence` reads it back to an equal model.
std::string convergence_json(const ConvergenceModel& m);

}  // namespace strata::strategies
