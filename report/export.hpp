#pragma once
// `strata export`: a plan as the settings another training engine reads
// (docs/export.md):
//   megatron    Megatron-LM pretrain_gpt.py flags (megatron/training/arguments.py)
//   deepspeed   a ds_config.json (DeepSpeed's docs/_pages/config-json.md)
//   torchtitan  a TOML fragment of torchtitan's JobConfig
//               (torchtitan/config/job_config.py)
// A plan choice the engine cannot express is listed in `unsupported`, never
// dropped silently; `notes` say what the emitted settings approximate and
// what is left to the model code or to the user.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "strategies/scenario.hpp"

namespace strata::report {

enum class ExportTarget { Megatron, DeepSpeed, TorchTitan };

struct Exported {
  // megatron: comment lines (`# …`) then the flags, one per line joined by
  // " \" (one shell line); deepspeed: the JSON object, no comments (JSON has
  // none); torchtitan: comment lines then TOML tables.
  std::string text;
  // "zero=3 (why, and what comes nearest)": plan choices the engine cannot
  // express. megatron and torchtitan also print them as comments in `text`
  // (`# not expressible in Megatron-LM: …`); deepspeed only here.
  std::vector<std::string> unsupported;
  // Approximations and what the engine leaves to the model code.
  std::vector<std::string> notes;
};

Exported export_megatron(const strategies::Scenario& sc);
Exported export_deepspeed(const strategies::Scenario& sc);
Exported export_torchtitan(const strategies::Scenario& sc);
// What `strata export` runs: refuses (InputError naming the rule) a plan
// the engine cannot launch — by the capabilities of the scenario's stack
// when it is this engine's, else of export_stack_name(target) — then
// renders the plan with the engine's defaults for every implementation key
// the scenario does not set itself (each change a note).
Exported export_plan(const strategies::Scenario& sc, ExportTarget target);
// The bundled stack each renderer's names were checked against:
// megatron-lm-2025, deepspeed, torchtitan.
std::string_view export_stack_name(ExportTarget target);

// The engine's name as the unsupported lines write it ("Megatron-LM",
// "DeepSpeed", "torchtitan").
std::string_view engine_name(ExportTarget target);

// The scenario to export from `path`:
// - a scenario JSON file: read as `strata simulate` reads it (a scenario with
//   a `space` exports its plan, which must then be valid on its own);
// - an explore output directory: the plan and batch of DIR/summary.json's
//   `top` list, entry `rank` (1-based; 1 = the best by throughput), on the
//   model and cluster of the explored scenario: `scenario_override` if
//   given, else DIR/scenario.json (explore's copy), else the path the
//   summary records (`summary.scenario`). Its model and GPU count must be
//   the explored ones.
// Throws InputError naming the file, the JSON path and the rule.
strategies::Scenario load_export_scenario(const std::string& path, std::size_t rank = 1,
                                          const std::string& scenario_override = "");

}  // namespace strata::report

namespace strata {
template <>
struct EnumNames<report::ExportTarget> {
  static constexpr std::array<std::pair<report::ExportTarget, std::string_view>, 3> table{
      {{report::ExportTarget::Megatron, "megatron"},
       {report::ExportTarget::DeepSpeed, "deepspeed"},
       {report::ExportTarget::TorchTitan, "torchtitan"}}};
};
}  // namespace strata
