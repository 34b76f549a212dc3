// strata models | gpus | clusters | stacks: the bundled presets.
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "costmodel/model_io.hpp"
#include "report/describe.hpp"
#include "strategies/stack.hpp"

namespace strata::app {

namespace {

// A listing: `list` renders the presets in the chosen format.
template <class List>
Command add_listing(CLI::App& app, const char* name, const char* help, List list) {
  auto format = std::make_shared<report::Format>(report::Format::Table);
  Subcommand cmd(app, name, help);
  add_format_option(cmd, *format);
  return {cmd.cli(), [format, list] { return list(*format); }};
}

}  // namespace

Command add_models(CLI::App& app) {
  return add_listing(app, "models", "List the bundled model presets", [](report::Format f) {
    return report::list_models(cost::model_presets(), f);
  });
}

Command add_gpus(CLI::App& app) {
  return add_listing(app, "gpus", "List the bundled GPU presets", [](report::Format f) {
    return report::list_gpus(cost::gpu_presets(), f);
  });
}

Command add_clusters(CLI::App& app) {
  return add_listing(app, "clusters", "List the bundled cluster presets", [](report::Format f) {
    return report::list_clusters(cost::cluster_presets(), f);
  });
}

Command add_stacks(CLI::App& app) {
  return add_listing(app, "stacks", "List the bundled software stacks and their settings", [](report::Format f) {
    std::vector<strategies::Stack> stacks;
    for (const auto& n : strategies::stack_names()) stacks.push_back(strategies::bundled_stack(n));
    return report::list_stacks(stacks, f);
  });
}

}  // namespace strata::app
