// strata calibrate --backend cpu|cuda: measure this machine for the cost model.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "backend/cpu/calibrate.hpp"
#include "costmodel/model_io.hpp"
#include "report/files.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"
#endif

namespace strata::app {

namespace {

struct CalibrateArgs {
  std::string backend;  // cpu | cuda
  std::string out;      // empty: the backend's cache file
  std::string cluster = "cpu-local";
  backend::cpu::CalibrateOptions options;
  report::Format format = report::Format::Table;
};

// The CPU measurement's progress line, off a terminal at most every 10 s.
// The ETA is the mean time per benchmark so far times those left.
struct BenchmarkProgress : StatusLine {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start = Clock::now(), last = start;

  void operator()(int done, int total, const std::string& next) {
    const auto now = Clock::now();
    if (!tty() && done > 0 && now - last < std::chrono::seconds(10)) return;
    last = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    char buf[200];
    if (done > 0)
      std::snprintf(buf, sizeof buf, "calibrate: %d/%d benchmarks, elapsed %.0f s, ETA %.0f s, next %s", done,
                    total, elapsed, elapsed / done * (total - done), next.c_str());
    else
      std::snprintf(buf, sizeof buf, "calibrate: %d benchmarks, first %s", total, next.c_str());
    show(buf);
  }
};

// `cluster_given`: --cluster was on the command line (cuda: else the device's preset).
std::string calibrate(const CalibrateArgs& a, [[maybe_unused]] bool cluster_given) {
  require_table_or_json(a.format, "calibrate");
  // --out is checked before measuring (minutes): a path the writer takes
  // (its directory is made when missing, as below).
  if (!a.out.empty()) {
    report::require_regular_or_missing(a.out);
    if (std::filesystem::is_directory(std::filesystem::path(a.out).parent_path().empty()
                                          ? std::filesystem::path(".")
                                          : std::filesystem::path(a.out).parent_path()))
      report::check_output_target(a.out);
  }
  std::string json, table, path;
  if (a.backend == "cuda") {
#if STRATA_HAVE_CUDA
    const auto devs = backend::cuda::devices();
    if (devs.empty()) throw CommandFailure("calibrate: no CUDA device is visible (no GPU, or no driver)");
    std::string name = a.cluster;
    if (!cluster_given) {
      name = backend::cuda::cluster_for_device(devs[0].name, devs[0].memory_bytes);
      if (name.empty())
        throw InputError("--cluster", "", "no cluster preset fits the device '" + devs[0].name +
                                              "': name one (strata clusters lists them)");
    }
    const auto cluster = cost::cluster_preset(name);
    const auto m = on_device([&] { return backend::cuda::measure_cuda({.quick = a.options.quick}); });
    json = backend::cuda::calibration_json(m, cluster, today());
    table = backend::cuda::render_measurements(m);
    path = a.out.empty() ? backend::cuda::default_calibration_cache_path() : a.out;
#else
    no_cuda_backend();
#endif
  } else {
    if (!backend::cpu::calibrate_available())
      throw CommandFailure("calibrate: this build has no Google Benchmark (configure with "
                           "-DSTRATA_BUILD_BENCH=ON)");
    const auto cluster = cost::cluster_preset(a.cluster);
    // Ctrl-C or SIGTERM ends the measurement after the benchmark in flight.
    // A calibration needs every curve, so a stopped one writes nothing: the
    // table of what was measured is printed (json: nothing on stdout) and
    // the exit status is 128 + the signal.
    const StopOnSignal stop;
    auto options = a.options;
    options.stop = stop.flag();
    BenchmarkProgress progress;
    options.on_benchmark = [&progress](int done, int total, const std::string& next) { progress(done, total, next); };
    const auto m = backend::cpu::measure_cpu(options);
    progress.finish();
    if (m.stopped) {
      std::cerr << "calibrate: stopped after " << m.benchmarks_run << " of " << m.benchmarks
                << " benchmarks; nothing written (a calibration needs every curve)\n";
      throw Interrupted{a.format == report::Format::Json ? std::string()
                                                         : backend::cpu::render_measurements(m),
                        stop.signal()};
    }
    json = backend::cpu::calibration_json(m, cluster, today());
    table = backend::cpu::render_measurements(m);
    path = a.out.empty() ? backend::cpu::default_calibration_cache_path() : a.out;
  }
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  report::write_file_atomically(path, json);
  std::cerr << "calibrate: wrote " << path << "\n";
  return a.format == report::Format::Json ? json : table;
}

}  // namespace

Command add_calibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  Subcommand cmd(
      app, "calibrate", "Measure this machine for the cost model (GEMM, memory, copies, collectives "
                   "between rank threads) and write a calibration JSON");
  cmd.option("--backend", a->backend, "Backend to measure: cpu or cuda").required().one_of({"cpu", "cuda"});
  cmd.flag("--quick", a->options.quick,
           "Fewer sizes, shorter runs (cpu: under 10 s; cuda: the short grid, under a minute on an H200)");
  cmd.option("--ranks", a->options.ranks, "Rank threads running at once while measuring (default 4)").range(1, 256);
  const Option cluster = cmd.option(
      "--cluster", a->cluster,
      "Cluster preset whose peaks the file is written against (default: cpu-local for cpu; for cuda "
      "the single-GPU preset of the device, e.g. 1xh200)");
  cmd.option("--out", a->out,
             "Write the calibration to FILE (default: the cache that validate reads, "
             "${XDG_CACHE_HOME:-$HOME/.cache}/strata/{cpu,cuda}-calibration.json)")
      .type_name("FILE");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a, cluster] { return calibrate(*a, cluster.given()); }};
}

}  // namespace strata::app
