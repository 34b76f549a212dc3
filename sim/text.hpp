#pragma once
// UTF-8 as the outputs need it. File names come from the command line and
// the file system, not from validated JSON: they may hold bytes that are
// not UTF-8 (a Latin-1 name), which a JSON document cannot carry.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace strata::sim {

// The code point of the UTF-8 sequence at s[i] and its length; length 0 for
// an invalid sequence (a stray continuation byte, a truncated, overlong or
// surrogate one, or beyond U+10FFFF).
std::pair<char32_t, std::size_t> utf8_at(std::string_view s, std::size_t i);

// `s` with every byte that is not part of a valid UTF-8 sequence written as
// the four characters \xNN (as the text tables show it); valid text is kept
// as it is. A file name so written fits a JSON string.
std::string utf8_escaped(std::string_view s);

}  // namespace strata::sim
