// strata_capability_matrix: the capability table (capabilities.hpp) as the
// Markdown feature matrix. Without arguments it prints the table; with
// `--update FILE` it rewrites the block between the matrix's markers in
// FILE (docs/cpu-backend.md), which a test holds equal to the table.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "backend/common/capabilities.hpp"

int main(int argc, char** argv) {
  using namespace strata::backend;
  try {
    if (argc == 1) {
      std::cout << capability_matrix_markdown();
      return 0;
    }
    if (argc != 3 || std::string(argv[1]) != "--update") {
      std::cerr << "usage: strata_capability_matrix [--update FILE]\n";
      return 2;
    }
    std::string text;
    {
      std::ifstream in(argv[2], std::ios::binary);
      if (!in) {
        std::cerr << "strata_capability_matrix: cannot read " << argv[2] << "\n";
        return 1;
      }
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    const std::string updated = with_capability_matrix(text);
    if (updated != text) {
      std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
      out << updated;
      if (!out) {
        std::cerr << "strata_capability_matrix: cannot write " << argv[2] << "\n";
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "strata_capability_matrix: " << e.what() << "\n";
    return 1;
  }
}
