#include "app/scenarios.hpp"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/calibrate.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/host_info.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/model_io.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "report/table.hpp"
#include "sim/error.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/executor.hpp"
#endif

namespace strata::app {

void require_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw InputError(path, "", "file not found");
}

namespace {

// The calibration cached at `path`, or nothing, said on stderr with what
// happens `instead`, when it does not read (a torn write, another
// program's file).
std::optional<cost::Calibration> read_cached(const std::string& path, const char* instead) {
  try {
    return cost::load_calibration_file(path, cost::ideal_calibration());
  } catch (const InputError& e) {
    std::cerr << "strata: warning: the cached calibration " << path << " does not read (" << e.what()
              << "); " << instead << "\n";
    return std::nullopt;
  }
}

// A scenario that names no calibration uses the one `strata calibrate`
// measured and cached for its GPU, where one exists: the bundled curves are
// estimates, a measurement of the machine is not. Said on stderr.
void default_to_measured(strategies::Scenario& sc) {
  if (sc.calibration) return;
  std::vector<std::string (*)()> caches{backend::cpu::default_calibration_cache_path};
#if STRATA_HAVE_CUDA
  caches.push_back(backend::cuda::default_calibration_cache_path);
#endif
  for (auto cache : caches) {
    std::string path;
    try {
      path = cache();
    } catch (const InputError&) {
      return;  // no cache directory (neither XDG_CACHE_HOME nor HOME)
    }
    if (!std::filesystem::is_regular_file(path)) continue;
    const auto cached = read_cached(path, "using the bundled curves");
    if (!cached) continue;
    const cost::Calibration& c = *cached;
    if (c.gpu.empty() || c.gpu != sc.cluster.gpu.name) continue;
    sc.calibration = path;
    std::cerr << "strata: calibration: " << path << ", measured " << c.date << " on " << c.machine << " for "
              << c.gpu << " (a scenario's \"calibration\" names another)\n";
    return;
  }
}

}  // namespace

strategies::Scenario load_scenario_file(const std::string& path, bool cached_calibration) {
  require_file(path);
  auto sc = strategies::load_scenario(path);
  if (cached_calibration) default_to_measured(sc);
  return sc;
}

strategies::Scenario load_scenario_text(std::string_view text, const std::string& source,
                                        const std::string& base_dir) {
  auto sc = strategies::parse_scenario(text, source, base_dir);
  default_to_measured(sc);
  return sc;
}

void require_plan(const strategies::Scenario& sc, const std::string& command, bool chain_models) {
  if (!chain_models) strategies::require_transformer(sc, command);
  if (sc.space) strategies::require_valid_plan(sc);
}

strategies::Scenario load_plan_scenario(const std::string& path, const std::string& command, bool chain_models,
                                        bool cached_calibration) {
  auto sc = load_scenario_file(path, cached_calibration);
  require_plan(sc, command, chain_models);
  return sc;
}

strategies::Scenario load_plan_or_explored(const std::string& path, std::size_t rank, const std::string& command,
                                           bool cached_calibration) {
  if (std::filesystem::is_directory(path)) {
    auto sc = report::load_export_scenario(path, rank == 0 ? 1 : rank, "");
    strategies::require_transformer(sc, command);
    return sc;
  }
  if (rank != 0) throw InputError("--rank", "", "takes an explore output directory, and " + path + " is a file");
  require_file(path);
  return load_plan_scenario(path, command, false, cached_calibration);
}

std::vector<std::string> scenario_inputs(const strategies::Scenario& sc) {
  std::vector<std::string> files = sc.files;
  if (sc.calibration) files.push_back(*sc.calibration);
  return files;
}

void require_cpu_executor(const strategies::Scenario& sc, const std::string& scenario_path) {
  if (auto why = backend::cpu::Executor::unsupported(sc)) throw InputError(scenario_path, "plan", *why);
  backend::cpu::Executor::require_host_memory(sc, backend::host_info().memory_bytes);
  print_differences(sc, backend::Backend::Cpu);
}

void print_differences(const strategies::Scenario& sc, backend::Backend b) {
  for (const auto& d : backend::differences(sc, b))
    std::cerr << "strata: note: the " << (b == backend::Backend::Cpu ? "CPU" : "CUDA")
              << " backend runs this plan otherwise: " << report::printable(d) << "\n";
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::optional<std::string> named_or_cached_calibration(const std::string& given,
                                                       const strategies::Scenario& sc,
                                                       std::string (*cache)()) {
  if (!given.empty()) {
    require_file(given);
    return given;
  }
  if (sc.calibration) return *sc.calibration;
  const std::string path = cache();
  // A cache that does not read is absent: the CPU's is measured again.
  if (!std::filesystem::exists(path) || !read_cached(path, "treated as absent")) return std::nullopt;
  return path;
}

std::string cpu_calibration_path(const std::string& given, const strategies::Scenario& sc) {
  if (auto found = named_or_cached_calibration(given, sc, backend::cpu::default_calibration_cache_path))
    return *found;
  const std::string path = backend::cpu::default_calibration_cache_path();
  if (!backend::cpu::calibrate_available())
    throw InputError("--calibration", "",
                     "no calibration file given and none cached at " + path +
                         "; this build cannot measure one (configure with -DSTRATA_BUILD_BENCH=ON)");
  const int ranks = static_cast<int>(std::max<std::int64_t>(1, sc.plan.gpus()));
  std::cerr << "strata: no CPU calibration yet: measuring this machine (quick, " << ranks
            << " rank threads) into " << path << "\n";
  const auto m = backend::cpu::measure_cpu({.quick = true, .ranks = ranks});
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  report::write_file_atomically(
      path, backend::cpu::calibration_json(m, cost::cluster_preset("cpu-local"), today()));
  return path;
}

#if STRATA_HAVE_CUDA
backend::cuda::Launch cuda_launch(const strategies::Scenario& sc, const std::string& scenario_path) {
  backend::cuda::Launch launch;
  try {
    launch = backend::cuda::launch_from_env();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError("environment", "", e.what());
  }
  if (auto why = backend::cuda::Executor::unsupported(sc, launch.world))
    throw InputError(scenario_path, "plan", *why);
  if (launch.rank == 0) print_differences(sc, backend::Backend::Cuda);
  return launch;
}

std::optional<std::string> cuda_calibration_path(const std::string& given, const strategies::Scenario& sc,
                                                 const char* command) {
  if (auto found = named_or_cached_calibration(given, sc, backend::cuda::default_calibration_cache_path))
    return found;
  const std::string path = backend::cuda::default_calibration_cache_path();
  std::cerr << "strata: warning: " << command << ": no CUDA calibration given or cached at " << path
            << "; the prediction uses the bundled estimates for " << sc.cluster.gpu.name
            << " (run `strata calibrate --backend cuda` first)\n";
  return std::nullopt;
}
#endif

}  // namespace strata::app
