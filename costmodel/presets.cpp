#include "costmodel/presets.hpp"

#include <algorithm>

namespace strata::cost {

std::vector<PresetFile> presets_of(std::string_view kind) {
  std::vector<PresetFile> out;
  for (const auto& p : detail::bundled_presets())
    if (p.kind == kind) out.push_back(p);
  std::sort(out.begin(), out.end(),
            [](const PresetFile& a, const PresetFile& b) { return a.name < b.name; });
  return out;
}

const PresetFile* find_preset(std::string_view kind, std::string_view name) {
  for (const auto& p : detail::bundled_presets())
    if (p.kind == kind && p.name == name) return &p;
  return nullptr;
}

std::string unknown_preset_rule(std::string_view what, std::string_view name,
                                const std::vector<std::string>& known) {
  std::string rule = "unknown " + std::string(what) + " preset \"" + std::string(name) +
                     "\" (known: ";
  for (std::size_t i = 0; i < known.size(); ++i) rule += (i ? ", " : "") + known[i];
  return rule + ")";
}

}  // namespace strata::cost
