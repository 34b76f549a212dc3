// The strata command line. The only place that prints to the terminal or
// chooses an exit code: 0 success, 2 bad input (file, JSON path and rule on
// stderr, nothing on stdout), 1 any other failure.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/calibrate.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/fit_convergence.hpp"
#include "backend/cpu/host_info.hpp"
#include "backend/cpu/train.hpp"
#include "backend/cpu/validate.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/executor.hpp"
#include "backend/cuda/process_group.hpp"
#endif
#include "costmodel/model_io.hpp"
#include "report/convergence_fit.hpp"
#include "report/describe.hpp"
#include "report/files.hpp"
#include "report/html_report.hpp"
#include "report/explore.hpp"
#include "report/export.hpp"
#include "report/published.hpp"
#include "report/simulate.hpp"
#include "report/tradeoff.hpp"
#include "report/table.hpp"
#include "sim/error.hpp"
#include "strategies/coarse.hpp"
#include "strategies/convergence_io.hpp"
#include "strategies/memory_lowering.hpp"
#include "strategies/scenario.hpp"
#include "strategies/step_costs.hpp"
#include "strategies/tradeoff.hpp"
#include "sim/trace.hpp"

namespace {

using namespace strata;

constexpr int kExitInput = 2;

// A run on a device that failed (no GPU, out of device memory, a CUDA
// error): reported as an error with exit 1, not as an internal one.
class DeviceFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `f` (work on the CUDA backend): bad input passes through, any other
// library error becomes a DeviceFailure.
template <class F>
auto on_device(F&& f) {
  try {
    return f();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw DeviceFailure(e.what());
  }
}

#if STRATA_HAVE_CUDA
// This process's place among the processes mpirun or srun started (one per
// GPU), from their variables; a malformed one is bad input.
backend::cuda::Launch cuda_launch() {
  try {
    return backend::cuda::launch_from_env();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError("environment", "", e.what());
  }
}

// Runs f(group) on this process's GPU (its local rank) as on_device does.
// With several processes, one that fails ends them all (MPI_Abort) after
// saying which rank failed and why: the others would wait for it in their
// next collective for ever.
template <class F>
auto on_cuda_ranks(const backend::cuda::Launch& launch, F&& f) {
  const auto group = on_device([&] { return std::make_unique<backend::cuda::ProcessGroup>(launch); });
  try {
    return on_device([&] { return f(*group); });
  } catch (const std::exception& e) {
    if (group->size() <= 1) throw;
    std::cerr << "strata: error: rank " << group->rank() << " of " << group->size() << ": "
              << report::printable(e.what()) << "\n";
    std::cerr.flush();
    const int code = dynamic_cast<const InputError*>(&e) != nullptr ? kExitInput : 1;
    group->abort_peers(code);
    std::exit(code);
  }
}
#endif

#if !STRATA_HAVE_CUDA
// `--backend cuda` in a build without the CUDA backend.
[[noreturn]] void no_cuda_backend() {
  throw InputError("--backend", "",
                   "cuda: this strata was built without the CUDA backend (configure on a machine with "
                   "the CUDA toolkit and NCCL; -DSTRATA_CUDA=ON makes their absence an error)");
}
#endif

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

// "i/n" with 0 <= i < n.
std::pair<std::uint64_t, std::uint64_t> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  std::uint64_t i = 0, n = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument(s);
    std::size_t used_i = 0, used_n = 0;
    i = std::stoull(s.substr(0, slash), &used_i);
    n = std::stoull(s.substr(slash + 1), &used_n);
    if (used_i != slash || used_n != s.size() - slash - 1 || s[0] == '-' || s[slash + 1] == '-')
      throw std::invalid_argument(s);
  } catch (const std::exception&) {
    throw CLI::ValidationError("--shard", "must be i/n, e.g. 0/4 (got \"" + s + "\")");
  }
  if (n < 1 || i >= n)
    throw CLI::ValidationError("--shard", "needs n >= 1 and 0 <= i < n (got " + s + ")");
  return {i, n};
}

std::string duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

// The explorer's progress on stderr: one line redrawn in place on a
// terminal, plain lines otherwise (logs, Slurm).
struct ProgressLine {
  bool tty = ::isatty(STDERR_FILENO) != 0;
  bool drawn = false;

  void operator()(const strategies::Progress& p) {
    char buf[256];
    auto n = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
    if (p.checked < p.total) {
      const double rate = p.elapsed_s > 0 ? static_cast<double>(p.checked) / p.elapsed_s : 0;
      std::snprintf(buf, sizeof buf, "explore: checking %llu/%llu plans (%.1f %%), %.0f configs/s",
                    n(p.checked), n(p.total),
                    100.0 * static_cast<double>(p.checked) / static_cast<double>(p.total), rate);
    } else {
      // Costliest plans are scored first: the ETA weighs what is left by its cost estimate.
      const double rate = p.scoring_s > 0 ? static_cast<double>(p.scored) / p.scoring_s : 0;
      const double eta = p.scored >= p.to_score ? 0
                         : p.cost_done > 0  ? p.scoring_s * (p.cost_total - p.cost_done) / p.cost_done
                                            : -1;
      std::snprintf(buf, sizeof buf,
                    "explore: %llu plans checked, %llu/%llu scored (%.1f %%), %.1f configs/s, "
                    "elapsed %s, ETA %s",
                    n(p.total), n(p.scored), n(p.to_score),
                    p.to_score > 0 ? 100.0 * static_cast<double>(p.scored) / static_cast<double>(p.to_score) : 100.0,
                    rate, duration(p.elapsed_s).c_str(), duration(eta).c_str());
    }
    if (tty) {
      std::fprintf(stderr, "\r%-110s", buf);
      drawn = true;
    } else {
      std::fprintf(stderr, "%s\n", buf);
    }
    std::fflush(stderr);
  }
  void finish() {
    if (tty && drawn) std::fputc('\n', stderr);
    drawn = false;
  }
};

// Today's date, ISO 8601 (UTC), for calibration files.
std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// The calibration file a prediction names or has cached: --calibration FILE
// (which must exist), else the scenario's "calibration", else the cache
// file when it exists; nothing otherwise. `cache` gives the cache's path,
// asked only when neither names a file.
std::optional<std::string> named_or_cached_calibration(const std::string& given,
                                                       const strategies::Scenario& sc,
                                                       std::string (*cache)()) {
  if (!given.empty()) {
    if (!std::filesystem::exists(given)) throw InputError(given, "", "file not found");
    return given;
  }
  if (sc.calibration) return *sc.calibration;
  if (const std::string path = cache(); std::filesystem::exists(path)) return path;
  return std::nullopt;
}

// The CPU calibration a prediction uses: named or cached, else measured
// (quickly, with the scenario's rank count) into the cache on first use.
std::string cpu_calibration_path(const std::string& given, const strategies::Scenario& sc) {
  if (auto found = named_or_cached_calibration(given, sc, backend::cpu::default_calibration_cache_path))
    return *found;
  const std::string path = backend::cpu::default_calibration_cache_path();
  if (!backend::cpu::calibrate_available())
    throw InputError("--calibration", "",
                     "no calibration file given and none cached at " + path +
                         "; this build cannot measure one (configure with -DSTRATA_BUILD_BENCH=ON)");
  const int ranks = static_cast<int>(std::max<std::int64_t>(1, sc.plan.gpus()));
  std::cerr << "strata: no CPU calibration yet: measuring this machine (quick, " << ranks
            << " rank threads) into " << path << "\n";
  const auto m = backend::cpu::measure_cpu({.quick = true, .ranks = ranks});
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  report::write_file_atomically(
      path, backend::cpu::calibration_json(m, cost::cluster_preset("cpu-local"), today()));
  return path;
}

#if STRATA_HAVE_CUDA
// The CUDA calibration a prediction uses: --calibration FILE, else the
// scenario's "calibration", else the cached one (`strata calibrate
// --backend cuda` writes it), else none: the bundled estimates for the GPU,
// with a warning.
std::optional<std::string> cuda_calibration_path(const std::string& given, const strategies::Scenario& sc,
                                                 const char* command) {
  if (auto found = named_or_cached_calibration(given, sc, backend::cuda::default_calibration_cache_path))
    return found;
  const std::string path = backend::cuda::default_calibration_cache_path();
  std::cerr << "strata: warning: " << command << ": no CUDA calibration given or cached at " << path
            << "; the prediction uses the bundled estimates for " << sc.cluster.gpu.name
            << " (run `strata calibrate --backend cuda` first)\n";
  return std::nullopt;
}
#endif

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
  std::string granularity = "layer";
  simulate
      ->add_option("--granularity", granularity,
                   "layer: the step's task graph, per layer (default); chunk: the explorer's "
                   "coarse level, one task per chunk pass (memory from the closed-form model)")
      ->check(CLI::IsMember({"layer", "chunk"}));
  std::string svg_path;
  strategies::TradeoffOptions tradeoff_options;
  auto* tradeoff = app.add_subcommand(
      "tradeoff", "Step time against memory for each recompute policy (none, every_k, sqrt, "
                  "revolve, optimal; for pipelines the plan's own steps with none, selective, "
                  "full, every_k, sqrt, optimal), from no savings down to the least feasible budget");
  tradeoff->add_option("SCENARIO", scenario_path, "A scenario JSON (a layer-chain model, or a "
                                                  "transformer: one chain per GPU with pp = 1, the "
                                                  "plan's steps with pp > 1)")
      ->required();
  tradeoff->add_option("--svg", svg_path, "Write the chart to FILE")->type_name("FILE");
  tradeoff->add_option("--budgets", tradeoff_options.budgets,
                       "Memory budgets in the sweep (default 16)")
      ->check(CLI::Range(2, 1000));
  tradeoff->add_option("--levels", tradeoff_options.levels,
                       "Memory levels of the optimal solver's dynamic programme (default 100)")
      ->check(CLI::Range(1, 100000));
  std::string cases_path;
  bool markdown = false;
  auto* published = app.add_subcommand(
      "validate-published", "Predict the published runs of a cases file and report the errors");
  published->add_option("FILE", cases_path, "published_cases.json")->required();
  published->add_flag("--markdown", markdown, "Print the table as Markdown (docs/accuracy.md)");
  std::string out_dir, shard_text;
  int jobs = 0;
  bool resume = false;
  std::size_t top_k = 10;
  auto* explore = app.add_subcommand(
      "explore", "Search the scenario's space: reject invalid plans, prune by memory, simulate "
                 "the rest; results stream to DIR/results.jsonl, counts and best plans to "
                 "DIR/summary.json");
  explore->add_option("SCENARIO", scenario_path, "A scenario JSON with a \"space\"")->required();
  explore->add_option("--out", out_dir, "Output directory")->required()->type_name("DIR");
  explore->add_option("--jobs", jobs, "Worker threads (default: hardware threads)")
      ->check(CLI::Range(1, 4096));
  explore->add_flag("--resume", resume,
                    "Continue DIR/results.jsonl: plans already there are not simulated again");
  explore->add_option("--shard", shard_text, "Explore plans with index % n == i only")
      ->type_name("i/n");
  explore->add_option("--top", top_k, "Keep the K best plans by the --rank-by key (default 10)")
      ->check(CLI::Range(0, 1000000));
  std::optional<strategies::RankBy> rank_by;
  explore
      ->add_option_function<std::string>(
          "--rank-by",
          [&rank_by](const std::string& v) {
            auto r = enum_from_name<strategies::RankBy>(v);
            if (!r)
              throw CLI::ValidationError("--rank-by",
                                         "must be one of " + enum_choices<strategies::RankBy>());
            rank_by = *r;
          },
          "Top plans by " + enum_choices<strategies::RankBy>() +
              " (default: time_to_train when the scenario has a goal, else throughput)")
      ->type_name("KEY");
  std::uint64_t max_plans = strategies::kDefaultMaxPlans;
  explore
      ->add_option("--max-plans", max_plans,
                   "Refuse, before any work, a space (or shard) of more plans than N (default " +
                       std::to_string(strategies::kDefaultMaxPlans) + ")")
      ->type_name("N");
  std::vector<std::string> merge_dirs;
  auto* merge = app.add_subcommand(
      "merge", "Combine the output directories of explore shards into one");
  merge->add_option("DIR", merge_dirs, "Explore output directories (--shard i/n)")->required();
  merge->add_option("--out", out_dir, "Output directory")->required()->type_name("DIR");
  std::string report_dir, report_out;
  auto* reporter = app.add_subcommand(
      "report", "Compare the plans of an explore output directory: report.html (charts), "
                "report.md and results.csv");
  reporter->add_option("DIR", report_dir, "An explore output directory")->required();
  reporter->add_option("--out", report_out, "Write the files there instead of DIR")
      ->type_name("DIR2");
  std::string run_backend;
  backend::cpu::TrainOptions run_options;
  auto* run = app.add_subcommand(
      "run", "Train the scenario's plan for real on the CPU executor (ranks as threads): loss "
             "and time per step, peak memory per rank");
  run->add_option("SCENARIO", scenario_path, "A scenario JSON")->required();
  run->add_option("--backend", run_backend, "Executor: cpu (rank threads) or cuda (one GPU per process; mpirun -n N for N GPUs)")
      ->required()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  run->add_option("--steps", run_options.steps, "Training steps (default 50)")
      ->check(CLI::Range(1, 100000000));
  run->add_option("--data", run_options.data,
                  "A file read as byte-level tokens (the model's vocab must be 256); default: a "
                  "synthetic Markov corpus whose best loss is known")
      ->type_name("FILE");
  run->add_option("--lr", run_options.lr, "Learning rate (default 0.003)")
      ->check(CLI::Range(0.0, 10.0));
  run->add_option("--trace", trace_path,
                  "Write the last step's measured task times (each stage's first rank) as a "
                  "Chrome/Perfetto trace to FILE, the format of simulate --trace")
      ->type_name("FILE");
  std::string run_calibration;
  run->add_option("--calibration", run_calibration,
                  "CPU calibration for the prediction beside the measurement (default: the "
                  "scenario's, else the cached one, measured on first use)")
      ->type_name("FILE");
  for (auto* cmd :
       {models, gpus, clusters, describe, simulate, tradeoff, published, explore, merge, run})
    add_format_option(cmd, format);
  std::string calibrate_backend, calibrate_out, calibrate_cluster = "cpu-local";
  backend::cpu::CalibrateOptions calibrate_options;
  auto* calibrate = app.add_subcommand(
      "calibrate", "Measure this machine for the cost model (GEMM, memory, copies, collectives "
                   "between rank threads) and write a calibration JSON");
  calibrate->add_option("--backend", calibrate_backend, "Backend to measure: cpu or cuda")
      ->required()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  calibrate->add_flag("--quick", calibrate_options.quick,
                      "Fewer sizes, shorter runs (cpu: under 10 s; cuda: the short grid, under a minute on an H200)");
  calibrate->add_option("--ranks", calibrate_options.ranks,
                        "Rank threads running at once while measuring (default 4)")
      ->check(CLI::Range(1, 256));
  [[maybe_unused]] auto* calibrate_cluster_option = calibrate->add_option(
      "--cluster", calibrate_cluster,
      "Cluster preset whose peaks the file is written against (default: cpu-local for cpu; for cuda "
      "the single-GPU preset of the device, e.g. 1xh200)");
  calibrate->add_option("--out", calibrate_out,
                        "Write the calibration to FILE (default: the cache that validate reads, "
                        "${XDG_CACHE_HOME:-$HOME/.cache}/strata/{cpu,cuda}-calibration.json)")
      ->type_name("FILE");
  add_format_option(calibrate, format);
  std::string validate_backend, validate_calibration;
  backend::cpu::ValidateOptions validate_options;
  auto* validate = app.add_subcommand(
      "validate", "Run the scenario's plan on the CPU executor and compare with the prediction: "
                  "step time, peak memory per rank and tag, time per task kind");
  validate->add_option("SCENARIO", scenario_path, "A scenario JSON")->required();
  validate->add_option("--backend", validate_backend, "Executor: cpu (rank threads) or cuda (one GPU per process; mpirun -n N for N GPUs)")
      ->required()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  validate->add_option("--calibration", validate_calibration,
                       "Calibration JSON (default: the scenario's, else the cached CPU calibration, "
                       "measured on first use)")
      ->type_name("FILE");
  validate->add_option("--steps", validate_options.steps, "Measured steps (default 5, after 1 warm-up)")
      ->check(CLI::Range(1, 1000000));
  add_format_option(validate, format);
  backend::cpu::FitConvergenceOptions fit_options;
  std::string fit_out, fit_plot, fit_base;
  bool fit_quick = false;
  auto* fitter = app.add_subcommand(
      "fit-convergence",
      "Train the scenario's model on the CPU backend to target losses at several global batch sizes, "
      "with each compression setting and optimizer, and fit the convergence model (S_min, B_noise, "
      "penalties) to the steps measured; held-out batches give its error");
  fitter->add_option("SCENARIO", scenario_path, "A scenario JSON the CPU executor runs")->required();
  fitter->add_option("--out", fit_out, "Write the fitted convergence file to FILE")->required()->type_name("FILE");
  fitter->add_option("--plot", fit_plot, "Write the measured steps and fitted curves as an SVG to FILE")
      ->type_name("FILE");
  fitter->add_flag("--quick", fit_quick,
                   "A few seconds: batches 4,8,16,32 (8 held out), one seed, no rate sweep, target 0.3 "
                   "nats above the best loss, no loss scaling, two settings");
  fitter->add_option("--batches", fit_options.batches, "Global batch sizes, sequences (default 2,4,8,16,32,64)")
      ->delimiter(',');
  fitter->add_option("--held-out", fit_options.held_out, "Batches left out of the fit (default 4,16)")
      ->delimiter(',');
  fitter->add_option("--settings", fit_options.settings,
                     "Lossy settings besides the baseline: topk:RATIO[:noef], randomk:RATIO[:noef], qsgd:BITS, "
                     "onebit, powersgd:RANK, opt:OPTIMIZER, sched:pipedream-2bw, each with an optional @LR_MULTIPLIER "
                     "(default: " +
                         [] {
                           std::string d;
                           for (const auto& x : backend::cpu::default_fit_settings()) d += (d.empty() ? "" : ",") + x;
                           return d;
                         }() + ", those the executor runs)")
      ->delimiter(',');
  fitter->add_option("--seeds", fit_options.seeds, "Runs per point (default 2)")->check(CLI::Range(1, 100));
  fitter->add_option("--target-offset", fit_options.target_offset,
                     "Target: nats above the best held-out loss (default 0.05)")
      ->check(CLI::Range(1e-3, 10.0));
  fitter->add_option("--scaling-offsets", fit_options.scaling_offsets,
                     "More targets for the loss scaling (default 0.1,0.2)")
      ->delimiter(',');
  fitter->add_option("--lr", fit_options.lr, "Learning rate at the smallest batch (default 0.003)")
      ->check(CLI::Range(1e-8, 10.0));
  fitter
      ->add_option_function<std::string>(
          "--lr-scaling",
          [&fit_options](const std::string& v) {
            auto r = enum_from_name<strategies::LrScaling>(v);
            if (!r)
              throw CLI::ValidationError("--lr-scaling", "must be one of " + enum_choices<strategies::LrScaling>());
            fit_options.lr_scaling = *r;
          },
          "How the rate tried first moves from the smallest batch: " + enum_choices<strategies::LrScaling>() +
              " (default none)")
      ->type_name("RULE");
  fitter->add_option("--lr-grid", fit_options.lr_grid, "Multipliers of the rate tried at each batch (default 0.5,1,2)")
      ->delimiter(',');
  fitter->add_option("--max-steps", fit_options.max_steps, "Steps per run at most (default 1500)")
      ->check(CLI::Range(1, 10000000));
  fitter->add_option("--setting-cap", fit_options.setting_cap,
                     "A setting's run stops after this many times the baseline's steps (default 6)")
      ->check(CLI::Range(1.0, 1000.0));
  fitter->add_option("--base", fit_base,
                     "Convergence model whose penalties the unmeasured settings keep (default: the bundled one)")
      ->type_name("NAME_OR_FILE");
  std::string fit_refit;
  fitter->add_option("--refit", fit_refit,
                     "Fit the measurements of an earlier output FILE again, without training (--held-out may "
                     "choose other batches)")
      ->type_name("FILE");
  bool fit_markdown = false;
  fitter->add_flag("--markdown", fit_markdown, "Print the table as Markdown (docs/accuracy.md)");
  add_format_option(fitter, format);
  std::string export_input, export_scenario, export_out;
  std::size_t export_rank = 1;
  report::ExportTarget export_target = report::ExportTarget::Megatron;
  auto* exporter = app.add_subcommand(
      "export", "Write a plan as Megatron-LM flags, a DeepSpeed ds_config.json or a torchtitan "
                "TOML fragment; choices the engine cannot express are listed, not dropped");
  exporter->add_option("PLAN_OR_DIR", export_input,
                       "A scenario JSON, or an explore output directory (its best plan)")
      ->required();
  exporter
      ->add_option_function<std::string>(
          "--to",
          [&export_target](const std::string& s) {
            auto t = enum_from_name<report::ExportTarget>(s);
            if (!t)
              throw CLI::ValidationError("--to", "must be one of " +
                                                     enum_choices<report::ExportTarget>());
            export_target = *t;
          },
          "Engine: " + enum_choices<report::ExportTarget>())
      ->required()
      ->type_name("ENGINE");
  exporter->add_option("--rank", export_rank,
                       "With a DIR: the N-th of its top plans by throughput (default 1)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000000}));
  exporter->add_option("--scenario", export_scenario,
                       "With a DIR: the explored scenario (model and cluster), when the path "
                       "DIR/summary.json records is not found from here")
      ->type_name("FILE");
  exporter->add_option("--out", export_out, "Write to FILE (whole or not at all) instead of stdout")
      ->type_name("FILE");

  std::pair<std::uint64_t, std::uint64_t> shard{0, 1};
  try {
    app.parse(argc, argv);
    if (!shard_text.empty()) shard = parse_shard(shard_text);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitInput;
  }

  try {
    std::string out;
    int cuda_rank = 0;  // this process's rank in a multi-GPU CUDA run: only rank 0 prints
    if (*models) out = report::list_models(cost::model_presets(), format);
    if (*gpus) out = report::list_gpus(cost::gpu_presets(), format);
    if (*clusters) out = report::list_clusters(cost::cluster_presets(), format);
    if (*describe) out = describe_target(target, format);
    if (*simulate) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      const auto sc = strategies::load_scenario(scenario_path);
      strategies::require_transformer(sc, "simulate");
      if (sc.space) strategies::require_valid_plan(sc);
      if (granularity == "chunk") {
        if (!trace_path.empty())
          throw InputError("--trace", "", "needs --granularity layer (the chunk level builds no task graph)");
        const strategies::ModelStepCosts costs(sc);
        const auto step = strategies::predict_step_coarse(sc, costs);
        out = report::render_simulation(sc, strategies::estimate_memory(sc), &step, format);
      } else {
        sim::RunResult run;
        strategies::LoweredStep lowered;
        const auto step = strategies::predict_step(sc, &run, &lowered);
        const auto mem = analytical ? strategies::estimate_memory(sc)
                                    : strategies::memory_from_run(sc, lowered, run);
        out = report::render_simulation(sc, mem, &step, format);
        if (!trace_path.empty())
          report::write_file_atomically(trace_path, sim::chrome_trace(lowered.graph, run));
      }
    }
    if (*tradeoff) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      const auto sc = strategies::load_scenario(scenario_path);
      const auto t = strategies::tradeoff(sc, tradeoff_options);
      out = report::render_tradeoff(t, format);
      if (!svg_path.empty()) report::write_file_atomically(svg_path, report::tradeoff_svg(t));
    }
    if (*published) {
      const auto r = report::validate_published(cases_path);
      out = markdown ? report::published_markdown(r) : report::render_published(r, format);
    }
    if (*explore) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      const auto sc = strategies::load_scenario(scenario_path);
      strategies::require_transformer(sc, "explore");
      ProgressLine line;
      report::ExploreRunOptions o;
      o.out_dir = out_dir;
      o.resume = resume;
      o.jobs = jobs;
      o.shard_index = shard.first;
      o.shard_count = shard.second;
      o.top_k = top_k;
      o.rank_by = rank_by;
      o.max_plans = max_plans;
      o.progress_interval_s = line.tty ? 0.25 : 10.0;
      o.on_progress = [&line](const strategies::Progress& p) { line(p); };
      try {
        const auto rep = report::run_explore(sc, o);
        line.finish();
        out = report::render_explore(rep.summary_json, &rep, format);
        // The comparison report beside the results (docs/report.md); the
        // results stand without it, so a failure here is only a warning.
        try {
          report::write_report(out_dir, out_dir);
          std::cerr << "explore: report in "
                    << (std::filesystem::path(out_dir) / "report.html").string() << "\n";
        } catch (const std::exception& e) {
          std::cerr << "strata: warning: explore: no report: " << report::printable(e.what()) << "\n";
        }
      } catch (...) {
        line.finish();
        throw;
      }
    }
    if (*merge) out = report::render_explore(report::merge_explore(merge_dirs, out_dir), nullptr, format);
    if (*exporter) {
      const auto sc = report::load_export_scenario(export_input, export_rank, export_scenario);
      strategies::require_transformer(sc, "export");
      const auto ex = report::export_plan(sc, export_target);
      // DeepSpeed's JSON has no comments: its notes go to stderr; every
      // engine's unsupported choices too, so they are seen with --out.
      const std::string engine(report::engine_name(export_target));
      if (export_target == report::ExportTarget::DeepSpeed)
        for (const auto& n : ex.notes) std::cerr << "strata: export: note: " << report::printable(n) << "\n";
      for (const auto& u : ex.unsupported)
        std::cerr << "strata: export: not expressible in " << engine << ": " << report::printable(u) << "\n";
      if (export_out.empty()) {
        out = ex.text;
      } else {
        report::write_file_atomically(export_out, ex.text);
      }
    }
    if (*reporter) out = report::write_report(report_dir, report_out.empty() ? report_dir : report_out);
    if (*run) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      if (format == report::Format::Csv) throw InputError("--format", "", "run prints table or json");
      auto sc = strategies::load_scenario(scenario_path);
      strategies::require_transformer(sc, "run");
      if (sc.space) strategies::require_valid_plan(sc);
      run_options.trace = !trace_path.empty();
      bool tty = ::isatty(STDERR_FILENO) != 0;
      auto progress = [&](const backend::cpu::TrainStep& s) {
        if (!tty) return;
        std::fprintf(stderr, "\rrun: step %d/%d, loss %.4f", s.step, run_options.steps, s.loss);
        if (s.step == run_options.steps) std::fputc('\n', stderr);
      };
      backend::cpu::TrainReport rep;
      if (run_backend == "cuda") {
#if STRATA_HAVE_CUDA
        const auto launch = cuda_launch();
        if (auto why = backend::cuda::Executor::unsupported(sc, launch.world))
          throw InputError(scenario_path, "plan", *why);
        if (auto cal = cuda_calibration_path(run_calibration, sc, "run")) sc.calibration = *cal;
        cuda_rank = launch.rank;
        tty = tty && launch.rank == 0;  // one progress line: rank 0's
        rep = on_cuda_ranks(launch, [&](const backend::cuda::ProcessGroup& group) {
          backend::cuda::Executor ex(sc, {.seed = run_options.seed,
                                          .lr = run_options.lr,
                                          .weight_decay = run_options.weight_decay,
                                          .device = group.local_rank(),
                                          .group = &group});
          return backend::cpu::train(sc, ex, run_options, progress);
        });
#else
        no_cuda_backend();
#endif
      } else {
        if (auto why = backend::cpu::Executor::unsupported(sc)) throw InputError(scenario_path, "plan", *why);
        backend::cpu::Executor::require_host_memory(sc, backend::host_info().memory_bytes);
        // The prediction printed beside the measurement uses this machine's
        // calibration, as validate does; a build that cannot measure one
        // (no Google Benchmark) predicts with the bundled estimates instead.
        try {
          sc.calibration = cpu_calibration_path(run_calibration, sc);
        } catch (const InputError& e) {
          if (!run_calibration.empty() || sc.calibration) throw;
          std::cerr << "strata: warning: run: " << report::printable(e.what())
                    << "; the predicted step time uses the bundled estimates\n";
        }
        backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
        rep = backend::cpu::train(sc, run_options, progress);
      }
      out = format == report::Format::Json ? backend::cpu::render_train_json(rep)
                                           : backend::cpu::render_train_table(rep);
      if (!trace_path.empty() && cuda_rank == 0) report::write_file_atomically(trace_path, rep.trace);
    }
    if (*calibrate) {
      if (format == report::Format::Csv) throw InputError("--format", "", "calibrate prints table or json");
      std::string json, table, path;
      if (calibrate_backend == "cuda") {
#if STRATA_HAVE_CUDA
        const auto devs = backend::cuda::devices();
        if (devs.empty()) throw DeviceFailure("calibrate: no CUDA device is visible (no GPU, or no driver)");
        std::string name = calibrate_cluster;
        if (calibrate_cluster_option->count() == 0) {
          name = backend::cuda::cluster_for_device(devs[0].name, devs[0].memory_bytes);
          if (name.empty())
            throw InputError("--cluster", "", "no cluster preset fits the device '" + devs[0].name +
                                                  "': name one (strata clusters lists them)");
        }
        const auto cluster = cost::cluster_preset(name);
        const auto m = on_device([&] { return backend::cuda::measure_cuda({.quick = calibrate_options.quick}); });
        json = backend::cuda::calibration_json(m, cluster, today());
        table = backend::cuda::render_measurements(m);
        path = calibrate_out.empty() ? backend::cuda::default_calibration_cache_path() : calibrate_out;
#else
        no_cuda_backend();
#endif
      } else {
        if (!backend::cpu::calibrate_available()) {
          std::cerr << "strata: error: calibrate: this build has no Google Benchmark (configure with "
                       "-DSTRATA_BUILD_BENCH=ON)\n";
          return 1;
        }
        const auto cluster = cost::cluster_preset(calibrate_cluster);
        const auto m = backend::cpu::measure_cpu(calibrate_options);
        json = backend::cpu::calibration_json(m, cluster, today());
        table = backend::cpu::render_measurements(m);
        path = calibrate_out.empty() ? backend::cpu::default_calibration_cache_path() : calibrate_out;
      }
      const auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      report::write_file_atomically(path, json);
      std::cerr << "calibrate: wrote " << path << "\n";
      out = format == report::Format::Json ? json : table;
    }
    if (*fitter) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      auto sc = strategies::load_scenario(scenario_path);
      strategies::require_transformer(sc, "fit-convergence");
      if (sc.space) strategies::require_valid_plan(sc);
      if (fit_quick) {
        auto& o = fit_options;
        if (fitter->count("--batches") == 0) o.batches = {4, 8, 16, 32};
        if (fitter->count("--held-out") == 0) o.held_out = {8};
        if (fitter->count("--seeds") == 0) o.seeds = 1;
        if (fitter->count("--lr-grid") == 0) o.lr_grid = {1};
        if (fitter->count("--scaling-offsets") == 0) o.scaling_offsets.clear();
        if (fitter->count("--target-offset") == 0) o.target_offset = 0.3;
        if (fitter->count("--max-steps") == 0) o.max_steps = 400;
        o.max_default_settings = 2;
      }
      if (fit_base.empty()) {
        fit_options.base = strategies::bundled_convergence();
      } else if (cost::names_a_file(fit_base)) {
        if (!std::filesystem::exists(fit_base)) throw InputError(fit_base, "", "file not found");
        fit_options.base = strategies::load_convergence_file(fit_base);
      } else {
        fit_options.base = strategies::bundled_convergence(fit_base);
      }
      strategies::FitRecord rec;
      if (!fit_refit.empty()) {
        if (!std::filesystem::exists(fit_refit)) throw InputError(fit_refit, "", "file not found");
        rec = report::load_fit_record(fit_refit);
        if (fitter->count("--held-out") > 0) rec.input.held_out = fit_options.held_out;
        backend::cpu::refit(sc, rec, fit_options.base);
      } else {
        backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
        rec = backend::cpu::fit_convergence(sc, fit_options, [](const std::string& line) {
          std::fprintf(stderr, "%s\n", line.c_str());
        });
      }
      const std::string file = report::fitted_convergence_json(rec);
      report::write_file_atomically(fit_out, file);
      if (!fit_plot.empty()) report::write_file_atomically(fit_plot, report::fit_plot_svg(rec));
      std::cerr << "fit-convergence: wrote " << fit_out << (fit_plot.empty() ? "" : " and " + fit_plot) << "\n";
      out = format == report::Format::Json ? file : report::render_fit(rec, format, fit_markdown);
    }
    if (*validate) {
      if (!std::filesystem::exists(scenario_path))
        throw InputError(scenario_path, "", "file not found");
      if (format == report::Format::Csv) throw InputError("--format", "", "validate prints table or json");
      auto sc = strategies::load_scenario(scenario_path);
      strategies::require_transformer(sc, "validate");
      if (sc.space) strategies::require_valid_plan(sc);
      backend::cpu::ValidateReport rep;
      if (validate_backend == "cuda") {
#if STRATA_HAVE_CUDA
        const auto launch = cuda_launch();
        if (auto why = backend::cuda::Executor::unsupported(sc, launch.world))
          throw InputError(scenario_path, "plan", *why);
        cuda_rank = launch.rank;
        // The prediction and the executor's lowering both read sc.calibration.
        if (auto cal = cuda_calibration_path(validate_calibration, sc, "validate")) {
          sc.calibration = *cal;
          const auto c = cost::load_calibration_file(*cal, cost::default_calibration(sc.cluster.gpu));
          if (c.backend != "cuda")
            std::cerr << "strata: warning: validate: " << *cal << " is a \"" << c.backend
                      << "\" calibration, not one measured by the CUDA backend\n";
        }
        rep = on_cuda_ranks(launch, [&](const backend::cuda::ProcessGroup& group) {
          backend::cuda::Executor ex(sc, {.seed = validate_options.seed, .device = group.local_rank(), .group = &group});
          return backend::cpu::validate(sc, ex, validate_options);
        });
#else
        no_cuda_backend();
#endif
      } else {
        if (auto why = backend::cpu::Executor::unsupported(sc)) throw InputError(scenario_path, "plan", *why);
        backend::cpu::Executor::require_host_memory(sc, backend::host_info().memory_bytes);
        // The prediction and the executor's lowering both read sc.calibration.
        sc.calibration = cpu_calibration_path(validate_calibration, sc);
        const auto cal = cost::load_calibration_file(*sc.calibration, cost::default_calibration(sc.cluster.gpu));
        if (cal.backend != "cpu")
          std::cerr << "strata: warning: validate: " << *sc.calibration << " is a \"" << cal.backend
                    << "\" calibration, not one measured by the CPU backend\n";
        backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
        rep = backend::cpu::validate(sc, validate_options);
      }
      out = format == report::Format::Json ? backend::cpu::render_validate_json(rep)
                                           : backend::cpu::render_validate_table(rep);
    }
    // Printed only once complete: an error leaves stdout empty. A multi-GPU
    // run prints one report, rank 0's (every rank holds all measurements).
    if (cuda_rank != 0) out.clear();
    std::fwrite(out.data(), 1, out.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const InputError& e) {
    // Messages quote the input (names, paths): no control character reaches the terminal.
    std::cerr << "strata: error: " << report::printable(e.what()) << "\n";
    return kExitInput;
  } catch (const DeviceFailure& e) {
    std::cerr << "strata: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "strata: internal error: " << report::printable(e.what()) << "\n";
    return 1;
  }
}
