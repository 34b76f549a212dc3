#pragma once
// String names for enums, declared once per enum as a table so parsing and
// printing never disagree and unknown strings are rejected (never mapped to a
// default, unlike nlohmann's enum macro).
//
//   template <> struct EnumNames<Schedule> {
//     static constexpr std::array<std::pair<Schedule, std::string_view>, 2> table{{
//         {Schedule::GPipe, "gpipe"}, {Schedule::OneFOneB, "1f1b"}}};
//   };
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

template <class E>
struct EnumNames;  // specialise with a `table` of {value, name} pairs

template <class E>
constexpr std::string_view enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::table)
    if (v == e) return n;
  return "?";
}

template <class E>
constexpr std::optional<E> enum_from_name(std::string_view s) {
  for (const auto& [v, n] : EnumNames<E>::table)
    if (n == s) return v;
  return std::nullopt;
}

// True when the table lists the enum's values 0, 1, … in order, so that its
// size is the enum's count and a value indexes arrays sized by it.
template <class E>
constexpr bool enum_table_dense() {
  std::size_t i = 0;
  for (const auto& [v, n] : EnumNames<E>::table)
    if (static_cast<std::size_t>(v) != i++) return false;
  return true;
}

// The number of values of an enum with a dense table (checked by the
// compiler): the size of arrays indexed by it.
template <class E>
constexpr std::size_t enum_count() {
  static_assert(enum_table_dense<E>(), "EnumNames<E>::table must list 0..n-1 in order");
  return EnumNames<E>::table.size();
}

// "a|b|c", for error messages and documentation.
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& [v, n] : EnumNames<E>::table) {
    if (!out.empty()) out += '|';
    out += n;
  }
  return out;
}

}  // namespace strata
