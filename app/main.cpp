// The strata command line. The only place that prints to the terminal or
// chooses an exit code: 0 success, 2 bad input (file, JSON path and rule on
// stderr, nothing on stdout), 1 any other failure. Each subcommand is in its
// own file (app/commands.hpp); this one registers them, parses, runs the
// one given and maps what it throws to an exit code.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "backend/common/out_of_memory.hpp"
#include "app/common.hpp"
#include "report/table.hpp"
#include "sim/error.hpp"

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first word when it names no subcommand: CLI11 would say only that a
// subcommand is required. Names the closest subcommand instead.
std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  const std::string word = argv[1];
  std::string best;
  std::size_t best_d = 4;  // suggest only close names
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return std::nullopt;
    const std::size_t d = edit_distance(word, sub->get_name());
    if (d < best_d) best_d = d, best = sub->get_name();
  }
  std::string msg = "unknown subcommand \"" + word + "\"";
  if (!best.empty()) msg += " (did you mean \"" + best + "\"?)";
  return msg + "; strata --help lists them";
}

// A command line the parser refused: one prefixed line, its text escaped
// as every other message is (an option's value may hold control
// characters), and where the options are listed.
int parse_failure(const CLI::ParseError& e, const std::vector<strata::app::Command>& commands) {
  std::string help = "strata --help";
  for (const auto& c : commands)
    if (*c.cmd) help = "strata " + c.cmd->get_name() + " --help";
  strata::app::print_error(std::string(e.what()) + " (" + help + " lists the options)");
  return strata::app::kExitInput;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::app;
  CLI::App app{"Strata: predict, compare and run strategies for training large neural networks"};
  app.set_version_flag("--version", "strata 0.1.0");
  app.require_subcommand(1);

  // In this order in `strata --help`.
  const std::vector<Command> commands{
      add_models(app),   add_gpus(app),     add_clusters(app),        add_stacks(app), add_describe(app),
      add_simulate(app), add_tradeoff(app), add_validate_published(app), add_explore(app),
      add_merge(app),    add_report(app),   add_run(app),             add_calibrate(app),
      add_validate(app), add_fit_convergence(app), add_export(app), add_import(app)};

  if (auto unknown = unknown_subcommand(app, argc, argv)) {
    print_error(*unknown);
    return kExitInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return parse_failure(e, commands);
  }

  try {
    std::string out;
    for (const auto& c : commands)
      if (*c.cmd) out = c.run();
    // Printed only once complete: an error leaves stdout empty.
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const CLI::ParseError& e) {
    // An option's value the command checks itself (explore --shard).
    return parse_failure(e, commands);
  } catch (const InputError& e) {
    print_error(e.what());
    return kExitInput;
  } catch (const Interrupted& e) {
    // What the command measured before the signal, then 128 + the signal.
    std::fwrite(e.output.data(), 1, e.output.size(), stdout);
    std::fflush(stdout);
    std::cerr << "strata: stopped by signal " << e.signal << "\n";
    return 128 + e.signal;
  } catch (const CommandFailure& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return 1;
  } catch (const backend::StepOutOfMemory& e) {
    print_error(e.what());
    return kExitOutOfMemory;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the system cannot follow (a symlink loop,
    // no permission, a name too long): bad input, named by the system.
    print_error(e.path1().string() + ": " + e.code().message());
    return kExitInput;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << report::printable(e.what()) << "\n";
    return 1;
  }
}
