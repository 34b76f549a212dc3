// strata import FILE --from megatron|deepspeed|torchtitan --scenario BASE:
// an engine's settings read back into a scenario (the inverse of export).
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "report/table.hpp"
#include "app/scenarios.hpp"
#include "sim/json_reader.hpp"

namespace strata::app {

namespace {

struct ImportArgs {
  std::string input;     // the engine's flags, ds_config.json or TOML
  std::string scenario;  // the model and cluster the plan runs on
  std::string out;       // empty: stdout
  report::ExportTarget from = report::ExportTarget::Megatron;
};

std::string import_plan(const ImportArgs& a) {
  if (!a.out.empty()) {
    report::require_output_apart(a.out, "--out", {a.input, a.scenario});
    report::check_output_target(a.out);
  }
  const auto base = load_scenario_file(a.scenario);
  report::require_output_apart(a.out, "--out", scenario_inputs(base));
  strategies::require_transformer(base, "import");
  const std::string text = read_input_file(a.input, kMaxJsonFileBytes);
  const auto im = report::import_plan(base, a.from, text, a.input);
  // The plan must be one Strata can price, named by the input file.
  strategies::require_valid_plan(im.scenario);
  for (const auto& b : im.from_base) std::cerr << "strata: import: from the scenario: " << report::printable(b) << "\n";
  if (!im.ignored.empty()) {
    std::string list;
    for (const auto& i : im.ignored) list += (list.empty() ? "" : ", ") + i;
    std::cerr << "strata: import: not part of a plan, ignored: " << report::printable(list) << "\n";
  }
  const std::string json =
      report::imported_scenario_json(read_input_file(a.scenario, kMaxJsonFileBytes), im, a.from);
  if (a.out.empty()) return json;
  report::write_file_atomically(a.out, json);
  return "";
}

}  // namespace

Command add_import(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  Subcommand cmd(app, "import",
                 "Read an engine's settings (Megatron-LM flags, a DeepSpeed ds_config.json, a torchtitan "
                 "TOML) back into a scenario on a base scenario's model and cluster: the inverse of export");
  cmd.option("FILE", a->input, "The engine's flags or config, as export writes them").required();
  enum_option<report::ExportTarget>(cmd, "--from", a->from, "Engine: " + enum_choices<report::ExportTarget>())
      .required()
      .type_name("ENGINE");
  cmd.option("--scenario", a->scenario,
             "The scenario whose model and cluster the plan runs on (and, for DeepSpeed, whose model "
             "parallelism, pipeline split and recompute policy it keeps)")
      .required()
      .type_name("FILE");
  cmd.option("--out", a->out, "Write the scenario to FILE (whole or not at all) instead of stdout")
      .type_name("FILE");
  return {cmd.cli(), [a] { return import_plan(*a); }};
}

}  // namespace strata::app
