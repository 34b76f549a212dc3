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

StatusLine::StatusLine(bool quiet) : tty_(::isatty(STDERR_FILENO) != 0), quiet_(quiet) {}

void StatusLine::show(const std::string& text) {
  if (quiet_) return;
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

std::string duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

namespace {
double monotonic_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

PhaseLine::PhaseLine(std::string who, bool quiet, double after_s)
    : StatusLine(quiet), who_(std::move(who)), start_(monotonic_s()), after_s_(after_s) {}

void PhaseLine::operator()(const std::string& phase, std::uint64_t done, std::uint64_t total) {
  const double now = monotonic_s();
  if (now - start_ < after_s_) {  // a short command shows nothing
    if (phase != phase_) phase_start_ = now;
    phase_ = phase;
    return;
  }
  const bool fresh = phase != phase_;
  if (fresh) {
    phase_ = phase;
    phase_start_ = now;
  } else if (now - last_shown_ < (tty() ? 0.25 : 10.0)) {
    return;
  }
  last_shown_ = now;
  const double elapsed = now - phase_start_;
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0;
  // One step (a re-simulation): only how long it has run.
  if (total <= 1) {
    show(who_ + ": " + report::printable(phase) + ", elapsed " + duration(elapsed));
    return;
  }
  const double eta = share > 0 ? elapsed * (1 - share) / share : -1;
  char buf[64];
  std::snprintf(buf, sizeof buf, ": %.0f %%, elapsed ", 100 * share);
  show(who_ + ": " + report::printable(phase) + buf + duration(elapsed) + ", ETA " + duration(eta));
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

#if !STRATA_HAVE_CUDA
void no_cuda_backend() {
  throw InputError("--backend", "",
                   "cuda: this strata was built without the CUDA backend (configure on a machine with "
                   "the CUDA toolkit and NCCL; -DSTRATA_CUDA=ON makes their absence an error)");
}
#endif

}  // namespace strata::app
