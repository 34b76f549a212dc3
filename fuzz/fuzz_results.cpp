// libFuzzer target: results.jsonl as `strata explore --resume` and
// `strata merge` read it (every line kept, as merge does). Bad input must
// end in strata::InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "report/explore.hpp"
#include "sim/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto rf = strata::report::parse_results(text, "fuzz-results.jsonl",
                                                  [](std::uint64_t) { return true; });
    // The valid part and the torn last line cover the text exactly.
    if (rf.valid_bytes + rf.torn_bytes != size) __builtin_trap();
  } catch (const strata::InputError&) {
  }
  return 0;
}
