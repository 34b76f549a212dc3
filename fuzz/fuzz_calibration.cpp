// libFuzzer target: a calibration file (`--calibration FILE`, a scenario's
// "calibration", the output of `strata calibrate`), read over the ideal
// calibration as the CLI reads one over the defaults. Bad input must end in
// strata::InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "costmodel/calibration.hpp"
#include "sim/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cal = strata::cost::parse_calibration_text(text, "fuzz-calibration.json",
                                                          strata::cost::ideal_calibration());
    // Evaluating a curve read from the input must not fail either.
    (void)cal.memory.at(1e6);
  } catch (const strata::InputError&) {
  }
  return 0;
}
