// What the command line and the Python module (python/) share: reading a
// scenario as the commands read it (the measured calibration by default),
// and the CPU calibration a prediction uses. Built as the library
// strata_app_scenarios (no CLI11): the `strata` executable and the module
// both link it. It throws (InputError for bad input); its notes and
// warnings go to stderr, as the commands' do.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/common/capabilities.hpp"
#include "strategies/scenario.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/process_group.hpp"
#endif

namespace strata::app {

// A missing file is bad input.
void require_file(const std::string& path);
// The scenario at `path`; a missing file is bad input. Without a
// calibration of its own it takes the one `strata calibrate` cached for its
// GPU, said on stderr, unless `cached_calibration` is false (a command given
// --calibration sets its own).
strategies::Scenario load_scenario_file(const std::string& path, bool cached_calibration = true);
// The same from JSON text (`source` names it in errors; relative paths
// resolve against `base_dir`).
strategies::Scenario load_scenario_text(std::string_view text, const std::string& source,
                                        const std::string& base_dir);
// What a command that lowers the plan itself (simulate, run, validate,
// fit-convergence) requires of a scenario read: a transformer, and with a
// space, a plan that keeps the space's rules.
// With `chain_models` the command takes layer-chain models too (simulate,
// explore); else it refuses them (require_transformer).
void require_plan(const strategies::Scenario& sc, const std::string& command, bool chain_models = false);
// load_scenario_file, then require_plan.
strategies::Scenario load_plan_scenario(const std::string& path, const std::string& command,
                                        bool chain_models = false, bool cached_calibration = true);
// `path` a scenario file (load_plan_scenario; `rank` must be 0, not
// given), or an explore output directory: the plan of entry `rank` of its
// top list (0 or 1: the best by throughput) on the explored model and
// cluster (report::load_export_scenario), for `run` and `validate`.
strategies::Scenario load_plan_or_explored(const std::string& path, std::size_t rank, const std::string& command,
                                           bool cached_calibration = true);

// The files a loaded scenario read besides itself (Scenario::files and its
// calibration): what an output must not replace (report::require_output_apart).
std::vector<std::string> scenario_inputs(const strategies::Scenario& sc);

// The CPU executor runs the scenario's plan on this host, or bad input says why not.
// (Then print_differences for the CPU backend.)
void require_cpu_executor(const strategies::Scenario& sc, const std::string& scenario_path);
// "strata: note: ..." on stderr for each thing backend `b` runs otherwise
// than the plan says (backend::differences: computed in fp32, standard
// attention for flash, ...).
void print_differences(const strategies::Scenario& sc, backend::Backend b);

// Today's date, ISO 8601 (UTC), for calibration files.
std::string today();

// The calibration file a prediction names or has cached: `given` (which
// must exist), else the scenario's "calibration", else the cache file when
// it exists and reads; nothing otherwise. `cache` gives the cache's path,
// asked only when neither names a file.
std::optional<std::string> named_or_cached_calibration(const std::string& given, const strategies::Scenario& sc,
                                                       std::string (*cache)());

// The CPU calibration a prediction uses: --calibration FILE (`given`, which
// must exist), else the scenario's "calibration", else the cache file; else
// measured (quickly, with the scenario's rank count) into the cache on first use.
std::string cpu_calibration_path(const std::string& given, const strategies::Scenario& sc);

#if STRATA_HAVE_CUDA
// This process's place among the processes mpirun or srun started (one per
// GPU), from their variables; a malformed one is bad input. Bad input too
// when the CUDA executor cannot run the scenario's plan on that many GPUs.
// (Then print_differences for the CUDA backend, on rank 0.)
backend::cuda::Launch cuda_launch(const strategies::Scenario& sc, const std::string& scenario_path);

// The CUDA calibration a prediction uses: --calibration FILE, else the
// scenario's "calibration", else the cached one (`strata calibrate
// --backend cuda` writes it), else none: the bundled estimates for the GPU,
// with a warning naming `command`.
std::optional<std::string> cuda_calibration_path(const std::string& given, const strategies::Scenario& sc,
                                                 const char* command);
#endif

}  // namespace strata::app
