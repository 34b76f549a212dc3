// strata describe MODEL_OR_SCENARIO: parameters, FLOPs and per-op rows.
#include <filesystem>
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "costmodel/model_io.hpp"
#include "report/describe.hpp"
#include "report/table.hpp"

namespace strata::app {

namespace {

struct DescribeArgs {
  std::string target;  // a model preset, a model JSON or a scenario JSON
  report::Format format = report::Format::Table;
};

std::string describe(const DescribeArgs& a) {
  cost::ExpandOptions options;
  const std::string& target = a.target;
  if (cost::names_a_file(target) || std::filesystem::exists(target)) {
    require_file(target);
    if (strategies::is_scenario_file(target)) {
      const auto s = strategies::load_scenario(target);
      options.micro_batch = s.batch.micro;
      options.precision = s.plan.precision;
      options.attention = s.plan.implementation.attention;
      return report::describe(s.model, options, &s, a.format);
    }
    std::vector<std::string> notes;
    const auto model = cost::load_model_file(target, &notes);
    for (const auto& n : notes) std::cerr << "strata: describe: note: " << report::printable(n) << "\n";
    return report::describe(model, options, nullptr, a.format);
  }
  return report::describe(cost::model_preset(target), options, nullptr, a.format);
}

}  // namespace

Command add_describe(CLI::App& app) {
  auto a = std::make_shared<DescribeArgs>();
  Subcommand cmd(app, "describe", "Parameters, training FLOPs per token and per-op rows of a model or scenario");
  cmd.option("MODEL_OR_SCENARIO", a->target,
             "A model preset, a model JSON (Strata or Hugging Face config.json) or a scenario JSON")
      .required();
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return describe(*a); }};
}

}  // namespace strata::app
