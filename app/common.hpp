// What the subcommands share: the exit code of bad input, the failures
// reported as errors, a thin layer over CLI11 to register options with
// (Subcommand, Option), the --format and --backend options, reading a
// scenario file, the calibration file a prediction uses and, with the CUDA
// backend, running on this process's GPU. Only app/ prints or exits
// (DESIGN.md, "Errors").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "app/scenarios.hpp"
#include "backend/common/capabilities.hpp"
#include "report/format.hpp"
#include "sim/error.hpp"
#include "sim/names.hpp"
#include "strategies/scenario.hpp"
#if STRATA_HAVE_CUDA
#include <cstdlib>
#include <iostream>
#include <memory>

#include "backend/cuda/process_group.hpp"
#endif

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace strata::app {

inline constexpr int kExitInput = 2;
// A plan a backend ran out of memory on (run, validate): the pool, the
// bytes and the memory model's prediction are in the message.
inline constexpr int kExitOutOfMemory = 3;

// A failure reported as an error with exit 1, not as an internal one: a run
// on a device that failed (no GPU, out of device memory, a CUDA error), a
// build that lacks what the command needs.
class CommandFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A command a signal stopped early: what it measured so far (`output`, printed
// as a finished command's is) and the signal; main exits with 128 + signal
// (130 for SIGINT, 143 for SIGTERM).
struct Interrupted {
  std::string output;
  int signal = 0;
};

// A long command's progress on stderr: one line redrawn in place on a
// terminal, plain lines otherwise (logs, Slurm). `finish` ends a drawn line.
// `quiet` (the commands' --quiet) shows nothing.
class StatusLine {
 public:
  explicit StatusLine(bool quiet = false);
  bool tty() const { return tty_; }
  void show(const std::string& text);
  void finish();

 private:
  bool tty_;
  bool quiet_;
  bool drawn_ = false;
};

// "42s", "3m05s", "1h02m"; "?" for a negative or absurd time.
std::string duration(double seconds);

// report::PhaseProgress as a status line: "WHO: PHASE 45 %, elapsed 3s,
// ETA 4s", the ETA the phase's own (its rate so far), redrawn at most every
// 0.25 s on a terminal and every 10 s otherwise, and at each new phase;
// nothing in the first `after_s` seconds of the command (a short run of a
// command that can be long prints no line).
class PhaseLine : public StatusLine {
 public:
  PhaseLine(std::string who, bool quiet, double after_s = 0);
  void operator()(const std::string& phase, std::uint64_t done, std::uint64_t total);

 private:
  std::string who_, phase_;
  double start_ = 0, after_s_ = 0;
  double phase_start_ = 0, last_shown_ = -1;
};

// While alive, SIGINT and SIGTERM set `flag()` instead of ending the
// process, so a long command can stop at a step boundary and report what it
// measured; a second signal ends the process at once. The previous handlers
// come back when it is destroyed. One at a time (the flag a handler sets is
// necessarily the process's).
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  const std::atomic<bool>* flag() const;
  int signal() const;  // 0 until one arrived
};

// "strata: error: MESSAGE" on stderr, control characters escaped (messages
// quote the input: names, paths).
void print_error(const std::string& message);

// Runs `f` (work on the CUDA backend): bad input passes through, any other
// library error becomes a CommandFailure.
template <class F>
auto on_device(F&& f) {
  try {
    return f();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw CommandFailure(e.what());
  }
}

// ------------------------------------------------------------- options --
// The CLI11 calls the command files make, so that they need not include
// CLI11 (commands.hpp says why). Each forwards to the CLI11 call of the
// same name with the same value type: value types, checks and help texts
// are CLI11's own. A file that needs more of CLI11 includes it and uses
// cli().

static_assert(std::is_same_v<std::size_t, std::uint64_t>, "option(name, std::uint64_t&) takes std::size_t");

class Option {
 public:
  explicit Option(CLI::Option* o) : o_(o) {}
  Option& required();
  Option& type_name(const std::string& name);
  Option& delimiter(char separator);
  // CLI::Range: its help names the bounds' type (INT, UINT, FLOAT).
  Option& range(int lo, int hi);
  Option& range(std::uint64_t lo, std::uint64_t hi);
  Option& range(double lo, double hi);
  Option& one_of(std::initializer_list<const char*> values);  // CLI::IsMember
  bool given() const;  // on the command line
  CLI::Option* cli() const { return o_; }

 private:
  CLI::Option* o_;
};

class Subcommand {
 public:
  Subcommand(CLI::App& app, const std::string& name, const std::string& help);
  Option option(const std::string& name, std::string& into, const std::string& help);
  Option option(const std::string& name, int& into, const std::string& help);
  Option option(const std::string& name, std::uint64_t& into, const std::string& help);
  // float, double and std::vector<double> options refuse NaN and infinities
  // (and numbers beyond double's range), before any range() check.
  Option option(const std::string& name, float& into, const std::string& help);
  Option option(const std::string& name, double& into, const std::string& help);
  Option option(const std::string& name, std::vector<std::string>& into, const std::string& help);
  Option option(const std::string& name, std::vector<std::int64_t>& into, const std::string& help);
  Option option(const std::string& name, std::vector<double>& into, const std::string& help);
  // A value `parse` reads (add_option_function<std::string>); bad_value on a bad one.
  Option option(const std::string& name, std::function<void(const std::string&)> parse, const std::string& help);
  void flag(const std::string& name, bool& into, const std::string& help);
  bool given(const std::string& option) const;  // on the command line
  CLI::App* cli() const { return app_; }

 private:
  CLI::App* app_;
};

// A bad option value, reported as the parser reports its own (exit 2):
// throws CLI::ValidationError. From an option's parse or a handler.
[[noreturn]] void bad_value(const std::string& option, const std::string& message);

// An option naming a value of enum E by the library's name table.
template <class E, class Into>
Option enum_option(Subcommand& cmd, const std::string& name, Into& into, const std::string& help) {
  return cmd.option(
      name,
      [name, &into](const std::string& s) {
        auto v = enum_from_name<E>(s);
        if (!v) bad_value(name, "must be one of " + enum_choices<E>());
        into = *v;
      },
      help);
}

// --format table|json|csv.
void add_format_option(Subcommand& cmd, report::Format& format);
// --backend cpu|cuda (required) of the commands that run a plan.
void add_executor_option(Subcommand& cmd, std::string& backend);
// SCENARIO_OR_DIR (required) and --rank of `run` and `validate`, read by
// load_plan_or_explored (`rank` stays 0 unless given).
void add_plan_source_options(Subcommand& cmd, std::string& path, std::size_t& rank);

// ------------------------------------------------------------ commands --
// `command` prints a table or JSON only: --format csv is bad input.
void require_table_or_json(report::Format format, const std::string& command);

// Reading scenarios, the executor checks and the CPU calibration:
// app/scenarios.hpp (shared with the Python module).

#if STRATA_HAVE_CUDA
// cuda_launch and cuda_calibration_path: app/scenarios.hpp (shared with the
// Python module).

// Runs f(group) on this process's GPU (its local rank) as on_device does.
// With several processes, one that fails ends them all (MPI_Abort) after
// saying which rank failed and why: the others would wait for it in their
// next collective for ever.
template <class F>
auto on_cuda_ranks(const backend::cuda::Launch& launch, F&& f) {
  const auto group = on_device([&] { return std::make_unique<backend::cuda::ProcessGroup>(launch); });
  try {
    return on_device([&] { return f(*group); });
  } catch (const std::exception& e) {
    if (group->size() <= 1) throw;
    print_error("rank " + std::to_string(group->rank()) + " of " + std::to_string(group->size()) + ": " +
                e.what());
    std::cerr.flush();
    const int code = dynamic_cast<const InputError*>(&e) != nullptr ? kExitInput : 1;
    group->abort_peers(code);
    std::exit(code);
  }
}
#else
// `--backend cuda` in a build without the CUDA backend.
[[noreturn]] void no_cuda_backend();
#endif

}  // namespace strata::app
