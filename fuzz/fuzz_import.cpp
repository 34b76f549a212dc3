// libFuzzer target: an engine's settings as `strata import` reads them
// (report/import_io.cpp) on a fixed base scenario. Byte 0 picks the engine
// (Megatron-LM flags, a DeepSpeed ds_config.json, a torchtitan TOML); the
// rest is the file. Bad input must end in strata::InputError; an accepted
// import must be a plan the validity rules either take or refuse by name,
// and its written scenario must read back to the same plan.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "report/export.hpp"
#include "sim/error.hpp"
#include "strategies/scenario.hpp"
#include "strategies/space.hpp"

namespace {

// Llama-3-8B (GQA, RoPE, untied) on two DGX H100 nodes: every engine's
// degrees have room (16 GPUs), and the DeepSpeed reader takes its model
// parallelism and recompute from here.
constexpr std::string_view kBase = R"({
  "model": "llama3-8b", "cluster": {"preset": "dgx-h100", "nodes": 2},
  "batch": {"global": 64, "micro": 1},
  "plan": {"dp": 8, "tp": 2, "recompute": "full"}})";

const strata::strategies::Scenario& base() {
  static const auto sc = strata::strategies::parse_scenario(kBase, "fuzz-base.json");
  return sc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using strata::report::ExportTarget;
  if (size < 1) return 0;
  const ExportTarget engine = data[0] % 3 == 0   ? ExportTarget::Megatron
                              : data[0] % 3 == 1 ? ExportTarget::DeepSpeed
                                                 : ExportTarget::TorchTitan;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  strata::report::Imported im;
  try {
    im = strata::report::import_plan(base(), engine, text, "fuzz-import");
    strata::strategies::require_valid_plan(im.scenario);
  } catch (const strata::InputError&) {
    return 0;
  }
  // What `strata import` writes reads back to the plan it imported.
  const std::string written = strata::report::imported_scenario_json(kBase, im, engine);
  const auto again = strata::strategies::parse_scenario(written, "fuzz-imported.json");
  if (strata::strategies::canonical_json(again.plan, again.batch) !=
      strata::strategies::canonical_json(im.scenario.plan, im.scenario.batch))
    __builtin_trap();
  return 0;
}
