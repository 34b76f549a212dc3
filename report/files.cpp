#include "report/files.hpp"

#include <filesystem>
#include <fstream>

#include "sim/error.hpp"

namespace strata::report {

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw InputError(path, "", "cannot write file");
    f << text;
    if (!f.flush()) throw InputError(path, "", "cannot write file");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw InputError(path, "", "cannot write file: " + ec.message());
}

}  // namespace strata::report
