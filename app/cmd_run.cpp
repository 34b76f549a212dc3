// strata run SCENARIO --backend cpu|cuda: train the plan for real.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/train.hpp"
#include "report/files.hpp"
#include "report/table.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/executor.hpp"
#endif

namespace strata::app {

namespace {

struct RunArgs {
  std::string scenario;     // a scenario JSON or an explore output directory
  std::size_t rank = 0;     // with a directory: the N-th of its top plans (0: not given, the first)
  std::string backend;      // cpu | cuda
  std::string trace;        // the last step's measured trace; empty: none
  std::string calibration;  // for the prediction beside the measurement
  backend::cpu::TrainOptions options;
  report::Format format = report::Format::Table;
};

std::string run(const RunArgs& a) {
  require_table_or_json(a.format, "run");
  // The trace's path is checked before training: not the scenario (or a
  // file of the explore directory), the calibration or the corpus read, a
  // path the writer takes.
  if (!a.trace.empty()) {
    report::require_output_apart(a.trace, "--trace", {a.scenario, a.calibration, a.options.data});
    report::check_output_target(a.trace);
  }
  // A calibration given names the prediction's; the cached one is not announced.
  auto sc = load_plan_or_explored(a.scenario, a.rank, "run", a.calibration.empty());
  report::require_output_apart(a.trace, "--trace", scenario_inputs(sc));
  auto options = a.options;
  options.trace = !a.trace.empty();
  int cuda_rank = 0;  // this process's rank in a multi-GPU CUDA run: only rank 0 prints
  bool tty = ::isatty(STDERR_FILENO) != 0;
  auto progress = [&](const backend::cpu::TrainStep& s) {
    if (!tty) return;
    std::fprintf(stderr, "\rrun: step %d/%d, loss %.4f", s.step, options.steps, s.loss);
    if (s.step == options.steps) std::fputc('\n', stderr);
  };
  backend::cpu::TrainReport rep;
  if (a.backend == "cuda") {
#if STRATA_HAVE_CUDA
    const auto launch = cuda_launch(sc, a.scenario);
    if (auto cal = cuda_calibration_path(a.calibration, sc, "run")) sc.calibration = *cal;
    cuda_rank = launch.rank;
    tty = tty && launch.rank == 0;  // one progress line: rank 0's
    rep = on_cuda_ranks(launch, [&](const backend::cuda::ProcessGroup& group) {
      backend::cuda::Executor ex(sc, {.seed = options.seed,
                                      .lr = options.lr,
                                      .weight_decay = options.weight_decay,
                                      .device = group.local_rank(),
                                      .group = &group});
      return backend::cpu::train(sc, ex, options, progress);
    });
#else
    no_cuda_backend();
#endif
  } else {
    require_cpu_executor(sc, a.scenario);
    // Ctrl-C or SIGTERM ends the run after the step in flight (the first
    // step when it comes earlier), with what was measured printed (the CPU
    // backend's ranks are this process's threads; a CUDA run's ranks would
    // have to agree on the step).
    const StopOnSignal stop;
    options.stop = stop.flag();
    // The prediction printed beside the measurement uses this machine's
    // calibration, as validate does; a build that cannot measure one
    // (no Google Benchmark) predicts with the bundled estimates instead.
    try {
      sc.calibration = cpu_calibration_path(a.calibration, sc);
    } catch (const InputError& e) {
      if (!a.calibration.empty() || sc.calibration) throw;
      std::cerr << "strata: warning: run: " << report::printable(e.what())
                << "; the predicted step time uses the bundled estimates\n";
    }
    backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
    rep = backend::cpu::train(sc, options, progress);
    if (rep.stopped) {
      if (tty) std::fputc('\n', stderr);
      std::string out = a.format == report::Format::Json ? backend::cpu::render_train_json(rep)
                                                         : backend::cpu::render_train_table(rep);
      if (!a.trace.empty()) report::write_file_atomically(a.trace, rep.trace);
      throw Interrupted{std::move(out), stop.signal()};
    }
  }
  // A multi-GPU run prints one report, rank 0's (every rank holds all measurements).
  if (cuda_rank != 0) return "";
  std::string out = a.format == report::Format::Json ? backend::cpu::render_train_json(rep)
                                                     : backend::cpu::render_train_table(rep);
  if (!a.trace.empty()) report::write_file_atomically(a.trace, rep.trace);
  return out;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  Subcommand cmd(
      app, "run", "Train the scenario's plan for real on the CPU executor (ranks as threads): loss "
             "and time per step, peak memory per rank");
  add_plan_source_options(cmd, a->scenario, a->rank);
  add_executor_option(cmd, a->backend);
  cmd.option("--steps", a->options.steps, "Training steps (default 50)").range(1, 100000000);
  cmd.option("--data", a->options.data,
             "A file read as byte-level tokens (the model's vocab must be 256); default: a "
             "synthetic Markov corpus whose best loss is known")
      .type_name("FILE");
  cmd.option("--lr", a->options.lr, "Learning rate (default 0.003)").range(0.0, 10.0);
  cmd.option("--trace", a->trace,
             "Write the last step's measured task times (each stage's first rank) as a "
             "Chrome/Perfetto trace to FILE, the format of simulate --trace")
      .type_name("FILE");
  cmd.option("--calibration", a->calibration,
             "CPU calibration for the prediction beside the measurement (default: the "
             "scenario's, else the cached one, measured on first use)")
      .type_name("FILE");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a] { return run(*a); }};
}

}  // namespace strata::app
