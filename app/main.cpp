// The strata command line. The only place that prints to the terminal or
// chooses an exit code: 0 success, 2 bad input (file, JSON path and rule on
// stderr, nothing on stdout), 1 any other failure.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "costmodel/model_io.hpp"
#include "report/describe.hpp"
#include "report/published.hpp"
#include "report/simulate.hpp"
#include "sim/error.hpp"
#include "strategies/memory_lowering.hpp"
#include "strategies/scenario.hpp"
#include "strategies/step_costs.hpp"
#include "sim/trace.hpp"

namespace {

using namespace strata;

constexpr int kExitInput = 2;

// Parses --format values with the same table the library uses.
void add_format_option(CLI::App* cmd, report::Format& format) {
  cmd->add_option_function<std::string>(
         "--format",
         [&format](const std::string& s) {
           auto f = enum_from_name<report::Format>(s);
           if (!f) throw CLI::ValidationError("--format", "must be one of " +
                                                              enum_choices<report::Format>());
           format = *f;
         },
         "Output format: " + enum_choices<report::Format>() + " (default table)")
      ->type_name("FORMAT");
}

std::string describe_target(const std::string& target, report::Format format) {
  cost::ExpandOptions options;
  if (cost::names_a_file(target) || std::filesystem::exists(target)) {
    if (!std::filesystem::exists(target)) throw InputError(target, "", "file not found");
    if (strategies::is_scenario_file(target)) {
      const auto s = strategies::load_scenario(target);
      options.micro_batch = s.batch.micro;
      options.precision = s.plan.precision;
      options.attention = s.plan.implementation.attention;
      return report::describe(s.model, options, &s, format);
    }
    return report::describe(cost::load_model_file(target), options, nullptr, format);
  }
  return report::describe(cost::model_preset(target), options, nullptr, format);
}

// Writes next to the destination and renames, so the file appears whole or
// not at all.
void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw InputError(path, "", "cannot write file");
    f << text;
    if (!f.flush()) throw InputError(path, "", "cannot write file");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Strata: predict, compare and run strategies for training large neural networks"};
  app.set_version_flag("--version", "strata 0.1.0");
  app.require_subcommand(1);

  report::Format format = report::Format::Table;
  std::string target;

  auto* models = app.add_subcommand("models", "List the bundled model presets");
  auto* gpus = app.add_subcommand("gpus", "List the bundled GPU presets");
  auto* clusters = app.add_subcommand("clusters", "List the bundled cluster presets");
  auto* describe = app.add_subcommand(
      "describe", "Parameters, training FLOPs per token and per-op rows of a model or scenario");
  describe->add_option("MODEL_OR_SCENARIO", target,
                       "A model preset, a model JSON (Strata or Hugging Face config.json) or a "
                       "scenario JSON")
      ->required();
  std::string scenario_path;
  bool analytical = false;
  auto* simulate = app.add_subcommand(
      "simulate", "Predict per-GPU memory (feasibility, peak, breakdown by tag and stage)");
  simulate->add_option("SCENARIO", scenario_path, "A scenario JSON")->required();
  simulate->add_flag("--analytical", analytical,
                     "Use the closed-form memory model instead of replaying the schedule");
  std::string trace_path;
  simulate->add_option("--trace", trace_path, "Write the step's Chrome/Perfetto trace to FILE")
      ->type_name("FILE");
  std::string cases_path;
  bool markdown = false;
  auto* published = app.add_subcommand(
      "validate-published", "Predict the published runs of a cases file and report the errors");
  published->add_option("FILE", cases_path, "published_cases.json")->required();
  published->add_flag("--markdown", markdown, "Print the table as Markdown (docs/accuracy.md)");
  for (auto* cmd : {models, gpus, clusters, describe, simulate, published})
    add_format_option(cmd, format);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitInput;
  }

  try {
    std::string out;
    if (*models) out = report::list_models(cost::model_presets(), format);
    if (*gpus) out = report::list_gpus(cost::gpu_presets(), format);
    if (*clusters) out = report::list_clusters(cost::cluster_presets(), format);
    if (*describe) out = describe_target(target, format);
    if (*simulate) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      const auto sc = strategies::load_scenario(scenario_path);
      sim::RunResult run;
      strategies::LoweredStep lowered;
      const auto step = strategies::predict_step(sc, &run, &lowered);
      const auto mem = analytical ? strategies::estimate_memory(sc)
                                  : strategies::memory_from_run(sc, lowered, run);
      out = report::render_simulation(sc, mem, &step, format);
      if (!trace_path.empty()) write_file_atomically(trace_path, sim::chrome_trace(lowered.graph, run));
    }
    if (*published) {
      const auto r = report::validate_published(cases_path);
      out = markdown ? report::published_markdown(r) : report::render_published(r, format);
    }
    // Printed only once complete: an error leaves stdout empty.
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const InputError& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return kExitInput;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << e.what() << "\n";
    return 1;
  }
}
