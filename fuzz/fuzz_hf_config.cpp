// libFuzzer target: a model file as `strata describe FILE` and a scenario's
// `"model": "path.json"` read it: a Hugging Face config.json (the seeds), or
// Strata's own model format. Bad input must end in strata::InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "costmodel/model_io.hpp"
#include "sim/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)strata::cost::parse_model_file_text(text, "fuzz-config.json");
  } catch (const strata::InputError&) {
  }
  return 0;
}
