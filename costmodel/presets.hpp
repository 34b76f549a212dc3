#pragma once
// The presets bundled with Strata (configs/models, configs/gpus,
// configs/clusters), compiled into the library.
#include <string>
#include <string_view>
#include <vector>

namespace strata::cost {

struct PresetFile {
  std::string_view kind;  // "models", "gpus", "clusters", "calibration", "convergence" or "stacks"
  std::string_view name;  // file name without .json
  std::string_view path;  // path in the source tree, for error messages
  std::string_view text;  // the JSON text
};

namespace detail {
const std::vector<PresetFile>& bundled_presets();  // generated
}

// Presets of one kind, in name order.
std::vector<PresetFile> presets_of(std::string_view kind);

}  // namespace strata::cost

namespace strata::cost {

// The preset `name` of `kind`, or nullptr.
const PresetFile* find_preset(std::string_view kind, std::string_view name);
// "unknown model preset "x" (known: a, b, c)".
std::string unknown_preset_rule(std::string_view what, std::string_view name,
                                const std::vector<std::string>& known);

}  // namespace strata::cost
