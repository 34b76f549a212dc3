#include "backend/cpu/host_info.hpp"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace strata::backend {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

HostInfo host_info() {
  HostInfo h;
  h.cpu_model = "unknown";
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      if (auto p = line.find(':'); p != std::string::npos) h.cpu_model = trim(line.substr(p + 1));
      break;
    }
  }
  h.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) h.memory_bytes = static_cast<Bytes>(pages) * page;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  return h;
}

}  // namespace strata::backend
