#pragma once
// Files Strata writes appear whole or not at all.
#include <string>

namespace strata::report {

// Writes `text` to `path` + ".tmp" and renames it over `path`. Throws
// InputError naming the path when it cannot.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace strata::report
