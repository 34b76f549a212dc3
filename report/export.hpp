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
  // The plan as rendered: the scenario's, with the engine's defaults for the
  // implementation settings it does not fix (export_plan). import_plan of
  // `text` gives it back (the round trip).
  strategies::Plan rendered;
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

// Megatron-Core's model flags for a model's per-layer choices, "" where the
// model needs none: --moe-layer-freq for a MoE model's dense blocks, as the
// integer N where the model's rule is Megatron-Core's own (an expert block
// every N from block 0: gpt_layer_specs.py, get_gpt_decoder_layer_specs),
// else as the Python list expression arguments.py's moe_freq_type evaluates
// (1 an expert layer, 0 a dense one: "[0]*3+[1]*58", "([0]+[1])*12");
// --window-size as the (left, right) pair
// FlashAttention's window_size takes (a query attends to `left` earlier
// keys and itself, so a window of w keys is w − 1, 0), beside
// --window-attn-skip-freq N (one full-attention layer after N − 1 windowed
// ones: the model's global_every). A window covering the sequence is none.
std::string megatron_moe_layer_freq(const cost::ModelSpec& m);
std::string megatron_window_size(const cost::ModelSpec& m);

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
// `strata import`: an engine's settings read back into a plan on `base`'s
// model and cluster — the inverse of export_plan, flag for flag and key for
// key (export_io_test.cpp holds the round trip). Megatron-LM's flags must
// describe `base`'s model; dp is the scenario's GPUs over tp x pp x cp.
// DeepSpeed's ds_config.json carries no model parallelism, pipeline split
// or recompute policy: those come from `base`'s plan (`from_base` says so).
// The scenario names the engine's stack with every implementation setting
// fixed. Throws InputError (file, flag or key path, rule `import-*`).
struct Imported {
  strategies::Scenario scenario;
  std::vector<std::string> from_base;  // what the file does not carry, taken from base
  std::vector<std::string> ignored;    // flags and keys that are not part of a plan
};
Imported import_plan(const strategies::Scenario& base, ExportTarget from, std::string_view text,
                     const std::string& file);
// The base scenario's JSON text (`//` comments allowed, as scenario files
// take them) with the imported plan and batch, the engine's stack, and no
// space.
std::string imported_scenario_json(std::string_view base_text, const Imported& im, ExportTarget from);

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
