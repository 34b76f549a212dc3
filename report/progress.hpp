#pragma once
// What a long read or check of an explore directory is doing, for a
// progress line (strata report, and the report explore writes at its end):
// `phase` ("checking DIR/results.jsonl"), `done` of `total` (bytes of a
// file, or plans). Called often; the caller paces what it prints.
#include <cstdint>
#include <functional>
#include <string>

namespace strata::report {

using PhaseProgress = std::function<void(const std::string& phase, std::uint64_t done, std::uint64_t total)>;

}  // namespace strata::report
