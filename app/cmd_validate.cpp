// strata validate SCENARIO --backend cpu|cuda: run the plan and compare with the prediction.
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/validate.hpp"
#include "costmodel/calibration.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/executor.hpp"
#endif

namespace strata::app {

namespace {

struct ValidateArgs {
  std::string scenario;     // a scenario JSON or an explore output directory
  std::size_t rank = 0;     // with a directory: the N-th of its top plans (0: not given, the first)
  std::string backend;      // cpu | cuda
  std::string calibration;  // empty: the scenario's, else the cached one
  backend::cpu::ValidateOptions options;
  report::Format format = report::Format::Table;
};

// A calibration measured by another backend than `backend` gets a warning.
void warn_if_other_backend(const std::string& path, const strategies::Scenario& sc, const std::string& backend,
                           const char* measured_by) {
  const auto c = cost::load_calibration_file(path, cost::default_calibration(sc.cluster.gpu));
  if (c.backend != backend)
    std::cerr << "strata: warning: validate: " << path << " is a \"" << c.backend
              << "\" calibration, not one measured by the " << measured_by << " backend\n";
}

std::string validate(const ValidateArgs& a) {
  require_table_or_json(a.format, "validate");
  // A calibration given names the prediction's; the cached one is not announced.
  auto sc = load_plan_or_explored(a.scenario, a.rank, "validate", a.calibration.empty());
  backend::cpu::ValidateReport rep;
  if (a.backend == "cuda") {
#if STRATA_HAVE_CUDA
    const auto launch = cuda_launch(sc, a.scenario);
    // The prediction and the executor's lowering both read sc.calibration.
    if (auto cal = cuda_calibration_path(a.calibration, sc, "validate")) {
      sc.calibration = *cal;
      warn_if_other_backend(*cal, sc, "cuda", "CUDA");
    }
    rep = on_cuda_ranks(launch, [&](const backend::cuda::ProcessGroup& group) {
      backend::cuda::Executor ex(sc, {.seed = a.options.seed, .device = group.local_rank(), .group = &group});
      return backend::cpu::validate(sc, ex, a.options);
    });
    // A multi-GPU run prints one report, rank 0's (every rank holds all measurements).
    if (launch.rank != 0) return "";
#else
    no_cuda_backend();
#endif
  } else {
    require_cpu_executor(sc, a.scenario);
    // The prediction and the executor's lowering both read sc.calibration.
    sc.calibration = cpu_calibration_path(a.calibration, sc);
    warn_if_other_backend(*sc.calibration, sc, "cpu", "CPU");
    backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
    // Ctrl-C or SIGTERM ends the measurement after the step in flight (the
    // first measured step when it comes earlier), with the comparison of
    // the steps measured so far printed; exit 128 + the signal.
    const StopOnSignal stop;
    auto options = a.options;
    options.stop = stop.flag();
    rep = backend::cpu::validate(sc, options);
    if (rep.stopped)
      throw Interrupted{a.format == report::Format::Json ? backend::cpu::render_validate_json(rep)
                                                         : backend::cpu::render_validate_table(rep),
                        stop.signal()};
  }
  return a.format == report::Format::Json ? backend::cpu::render_validate_json(rep)
                                          : backend::cpu::render_validate_table(rep);
}

}  // namespace

Command add_validate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  Subcommand cmd(
      app, "validate", "Run the scenario's plan on the CPU executor and compare with the prediction: "
                  "step time, peak memory per rank and tag, time per task kind");
  add_plan_source_options(cmd, a->scenario, a->rank);
  add_executor_option(cmd, a->backend);
  cmd.option("--calibration", a->calibration,
             "Calibration JSON (default: the scenario's, else the cached CPU calibration, "
             "measured on first use)")
      .type_name("FILE");
  cmd.option("--steps", a->options.steps, "Measured steps (default 5, after 1 warm-up)").range(1, 1000000);
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return validate(*a); }};
}

}  // namespace strata::app
