// strata export PLAN_OR_DIR --to megatron|deepspeed|torchtitan: a plan in
// another framework's terms.
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "report/table.hpp"

namespace strata::app {

namespace {

struct ExportArgs {
  std::string input;     // a scenario JSON or an explore output directory
  std::string scenario;  // with a directory: the explored scenario, when not found from its summary
  std::string out;       // empty: stdout
  std::size_t rank = 1;  // with a directory: the N-th of its top plans
  report::ExportTarget target = report::ExportTarget::Megatron;
};

std::string export_plan(const ExportArgs& a) {
  // Not a file read (the scenario, or one of the explore directory's), a path the writer takes.
  if (!a.out.empty()) {
    report::require_output_apart(a.out, "--out", {a.input, a.scenario});
    report::check_output_target(a.out);
  }
  const auto sc = report::load_export_scenario(a.input, a.rank, a.scenario);
  report::require_output_apart(a.out, "--out", scenario_inputs(sc));
  strategies::require_transformer(sc, "export");
  const auto ex = report::export_plan(sc, a.target);
  // DeepSpeed's JSON has no comments: its notes go to stderr; every
  // engine's unsupported choices too, so they are seen with --out.
  const std::string engine(report::engine_name(a.target));
  if (a.target == report::ExportTarget::DeepSpeed)
    for (const auto& n : ex.notes) std::cerr << "strata: export: note: " << report::printable(n) << "\n";
  for (const auto& u : ex.unsupported)
    std::cerr << "strata: export: not expressible in " << engine << ": " << report::printable(u) << "\n";
  if (a.out.empty()) return ex.text;
  report::write_file_atomically(a.out, ex.text);
  return "";
}

}  // namespace

Command add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  Subcommand cmd(
      app, "export", "Write a plan as Megatron-LM flags, a DeepSpeed ds_config.json or a torchtitan "
                "TOML fragment; choices the engine cannot express are listed, not dropped");
  cmd.option("PLAN_OR_DIR", a->input, "A scenario JSON, or an explore output directory (its best plan)").required();
  enum_option<report::ExportTarget>(cmd, "--to", a->target, "Engine: " + enum_choices<report::ExportTarget>())
      .required()
      .type_name("ENGINE");
  cmd.option("--rank", a->rank, "With a DIR: the N-th of its top plans by throughput (default 1)")
      .range(std::size_t{1}, std::size_t{1000000});
  cmd.option("--scenario", a->scenario,
             "With a DIR: the explored scenario (model and cluster), when the path "
             "DIR/summary.json records is not found from here")
      .type_name("FILE");
  cmd.option("--out", a->out, "Write to FILE (whole or not at all) instead of stdout").type_name("FILE");
  return {cmd.cli(), [a] { return export_plan(*a); }};
}

}  // namespace strata::app
