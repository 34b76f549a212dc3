#include "app/common.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include <signal.h>
#include <unistd.h>

#include "backend/cpu/calibrate.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/host_info.hpp"
#include "costmodel/calibration.hpp"
#include "costmodel/model_io.hpp"
#include "report/files.hpp"
#include "report/export.hpp"
#include "report/table.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/executor.hpp"
#endif

namespace strata::app {

namespace {
// The process's one stop request (a signal handler can reach nothing else).
std::atomic<bool> g_stop{false};
volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_int, g_old_term;

extern "C" void on_stop_signal(int sig) {
  if (g_stop.load()) {  // the second one: end now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  g_stop.store(true);
}
}  // namespace

StatusLine::StatusLine() : tty_(::isatty(STDERR_FILENO) != 0) {}

void StatusLine::show(const std::string& text) {
  if (tty_) {
    // Padded to clear what a longer line before it left.
    std::fprintf(stderr, "\r%-110s", text.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void StatusLine::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

StopOnSignal::StopOnSignal() {
  g_stop.store(false);
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopOnSignal::~StopOnSignal() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

const std::atomic<bool>* StopOnSignal::flag() const { return &g_stop; }
int StopOnSignal::signal() const { return static_cast<int>(g_signal); }

void print_error(const std::string& message) {
  std::cerr << "strata: error: " << report::printable(message) << "\n";
}

Option& Option::required() {
  o_->required();
  return *this;
}
Option& Option::type_name(const std::string& name) {
  o_->type_name(name);
  return *this;
}
Option& Option::delimiter(char separator) {
  o_->delimiter(separator);
  return *this;
}
Option& Option::range(int lo, int hi) {
  o_->check(CLI::Range(lo, hi));
  return *this;
}
Option& Option::range(std::uint64_t lo, std::uint64_t hi) {
  o_->check(CLI::Range(lo, hi));
  return *this;
}
Option& Option::range(double lo, double hi) {
  o_->check(CLI::Range(lo, hi));
  return *this;
}
Option& Option::one_of(std::initializer_list<const char*> values) {
  o_->check(CLI::IsMember(std::vector<const char*>(values)));
  return *this;
}
bool Option::given() const { return o_->count() > 0; }

namespace {

// Every floating-point option's values are finite: "nan", "inf" and
// overflowing numbers (1e400) are refused by name. CLI::Range alone lets NaN
// through, since every comparison with it is false. Text that is no number
// at all is left to CLI11's conversion, which names the option itself.
template <class T>
const CLI::Validator& finite_number() {
  static const CLI::Validator v(
      [](std::string& s) -> std::string {
        const char* begin = s.c_str();
        char* end = nullptr;
        const T d = std::is_same_v<T, float> ? std::strtof(begin, &end) : std::strtod(begin, &end);
        if (end == begin || std::isfinite(d)) return {};
        return "must be a finite number (got " + s + ")";
      },
      "");
  return v;
}

}  // namespace

Subcommand::Subcommand(CLI::App& app, const std::string& name, const std::string& help)
    : app_(app.add_subcommand(name, help)) {}
Option Subcommand::option(const std::string& name, std::string& into, const std::string& help) {
  return Option(app_->add_option(name, into, help));
}
Option Subcommand::option(const std::string& name, int& into, const std::string& help) {
  return Option(app_->add_option(name, into, help));
}
Option Subcommand::option(const std::string& name, std::uint64_t& into, const std::string& help) {
  return Option(app_->add_option(name, into, help));
}
Option Subcommand::option(const std::string& name, float& into, const std::string& help) {
  return Option(app_->add_option(name, into, help)->check(finite_number<float>()));
}
Option Subcommand::option(const std::string& name, double& into, const std::string& help) {
  return Option(app_->add_option(name, into, help)->check(finite_number<double>()));
}
Option Subcommand::option(const std::string& name, std::vector<std::string>& into, const std::string& help) {
  return Option(app_->add_option(name, into, help));
}
Option Subcommand::option(const std::string& name, std::vector<std::int64_t>& into, const std::string& help) {
  return Option(app_->add_option(name, into, help));
}
Option Subcommand::option(const std::string& name, std::vector<double>& into, const std::string& help) {
  return Option(app_->add_option(name, into, help)->check(finite_number<double>()));
}
Option Subcommand::option(const std::string& name, std::function<void(const std::string&)> parse,
                          const std::string& help) {
  return Option(app_->add_option_function<std::string>(name, std::move(parse), help));
}
void Subcommand::flag(const std::string& name, bool& into, const std::string& help) {
  app_->add_flag(name, into, help);
}
bool Subcommand::given(const std::string& option) const { return app_->count(option) > 0; }

void bad_value(const std::string& option, const std::string& message) {
  throw CLI::ValidationError(option, message);
}

void add_format_option(Subcommand& cmd, report::Format& format) {
  enum_option<report::Format>(cmd, "--format", format,
                              "Output format: " + enum_choices<report::Format>() + " (default table)")
      .type_name("FORMAT");
}

void add_executor_option(Subcommand& cmd, std::string& backend) {
  cmd.option("--backend", backend, "Executor: cpu (rank threads) or cuda (one GPU per process; mpirun -n N for N GPUs)")
      .required()
      .one_of({"cpu", "cuda"});
}

void add_plan_source_options(Subcommand& cmd, std::string& path, std::size_t& rank) {
  cmd.option("SCENARIO_OR_DIR", path,
             "A scenario JSON, or an explore output directory (the plan of its top list's --rank)")
      .required();
  cmd.option("--rank", rank, "With a DIR: the N-th of its top plans by throughput (default 1)")
      .range(std::size_t{1}, std::size_t{1000000});
}

void require_table_or_json(report::Format format, const std::string& command) {
  if (format == report::Format::Csv) throw InputError("--format", "", command + " prints table or json");
}

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

strategies::Scenario load_scenario_file(const std::string& path) {
  require_file(path);
  auto sc = strategies::load_scenario(path);
  default_to_measured(sc);
  return sc;
}

strategies::Scenario load_plan_scenario(const std::string& path, const std::string& command) {
  auto sc = load_scenario_file(path);
  strategies::require_transformer(sc, command);
  if (sc.space) strategies::require_valid_plan(sc);
  return sc;
}

strategies::Scenario load_plan_or_explored(const std::string& path, std::size_t rank, const std::string& command) {
  if (std::filesystem::is_directory(path)) {
    auto sc = report::load_export_scenario(path, rank == 0 ? 1 : rank, "");
    strategies::require_transformer(sc, command);
    return sc;
  }
  if (rank != 0) throw InputError("--rank", "", "takes an explore output directory, and " + path + " is a file");
  require_file(path);
  return load_plan_scenario(path, command);
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

namespace {

// The calibration file a prediction names or has cached: --calibration FILE
// (which must exist), else the scenario's "calibration", else the cache
// file when it exists; nothing otherwise. `cache` gives the cache's path,
// asked only when neither names a file.
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

}  // namespace

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
#else
void no_cuda_backend() {
  throw InputError("--backend", "",
                   "cuda: this strata was built without the CUDA backend (configure on a machine with "
                   "the CUDA toolkit and NCCL; -DSTRATA_CUDA=ON makes their absence an error)");
}
#endif

}  // namespace strata::app
