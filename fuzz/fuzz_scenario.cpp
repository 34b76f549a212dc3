// libFuzzer target: a whole scenario file (model, cluster, batch, plan,
// space, goal), read and validated as `strata simulate` and `explore` do.
// Bad input must end in strata::InputError; anything else (another
// exception, a sanitizer report, a hang) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/error.hpp"
#include "strategies/scenario.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto sc = strata::strategies::parse_scenario(text, "fuzz-scenario.json");
    if (sc.space) (void)sc.space->size();
  } catch (const strata::InputError&) {
  }
  return 0;
}
