// The subcommands of the strata command line (DESIGN.md, "The command
// line"), one file each: app/cmd_<name>.cpp (the three preset listings
// share cmd_presets.cpp, explore and merge cmd_explore.cpp). add_<name>
// registers the subcommand and its options on the app and returns it with
// its handler; app/main.cpp registers them all, parses and runs the one
// given. What the commands share is in app/common.hpp.
//
// Compile cost: the command files do not include CLI11. They register
// their options through the thin layer in app/common.hpp (Subcommand,
// Option: one forwarding function per CLI11 call they use); only
// common.cpp and main.cpp include CLI11. Measured (g++ 12, -O2 -g, CPU
// seconds): CLI11 2.1 is header-only and generates ~100 KB of code in
// every file that includes it (its validators, the App's inline members),
// ~8 s per file, a precompiled header saving little of it; a command file
// takes 1-2.5 s without it, ~11 s with it. All of app/ takes ~43 s this
// way, against ~22 s for the one main.cpp before and ~155 s had each
// command file included CLI11. Passing the command files a struct of
// parsed values instead would have put every command's options in one
// file again, away from the code that reads them.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace strata::app {

// What a command does once the command line is parsed: the text for
// stdout, printed by main only once complete (an error leaves stdout
// empty). It throws InputError on bad input (exit 2), CommandFailure on a
// failure that is not the program's (exit 1), and calls bad_value for an
// option value it checks itself (reported as the parser reports its own
// errors, exit 2).
using Handler = std::function<std::string()>;

struct Command {
  CLI::App* cmd = nullptr;  // the subcommand: true once given on the command line
  Handler run;
};

Command add_models(CLI::App& app);
Command add_gpus(CLI::App& app);
Command add_clusters(CLI::App& app);
Command add_stacks(CLI::App& app);
Command add_describe(CLI::App& app);
Command add_simulate(CLI::App& app);
Command add_tradeoff(CLI::App& app);
Command add_validate_published(CLI::App& app);
Command add_explore(CLI::App& app);
Command add_merge(CLI::App& app);
Command add_report(CLI::App& app);
Command add_run(CLI::App& app);
Command add_calibrate(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_fit_convergence(CLI::App& app);
Command add_export(CLI::App& app);
Command add_import(CLI::App& app);

}  // namespace strata::app
