#pragma once
// Output formats of the command line (`--format table|json|csv`).
#include <array>
#include <string_view>
#include <utility>

#include "sim/names.hpp"

namespace strata::report {
enum class Format { Table, Json, Csv };
}

namespace strata {
template <>
struct EnumNames<report::Format> {
  static constexpr std::array<std::pair<report::Format, std::string_view>, 3> table{
      {{report::Format::Table, "table"}, {report::Format::Json, "json"}, {report::Format::Csv, "csv"}}};
};
}  // namespace strata
