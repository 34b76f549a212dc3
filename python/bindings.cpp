// strata._core: the Python module's native half (docs/python.md). It links
// the libraries and calls what the command line calls (app/scenarios.hpp,
// report/), returning the CLI's JSON text, which python/strata/ turns into
// dicts: the field names are the CLI's because the renderer is the CLI's.
//
// Errors: strata::InputError becomes strata.InputError (file, path, rule;
// the message is the CLI's), a file system error on a path the user gave
// too (as the CLI reports it), any other strata::Error strata.Error, and
// any other C++ exception a RuntimeError (nanobind's translation): never a
// crash of the interpreter.
//
// The GIL is released while the libraries work. explore and validate run
// on a worker thread while the calling thread polls PyErr_CheckSignals with
// the GIL held, every 50 ms: a signal whose Python handler raises (Ctrl-C:
// KeyboardInterrupt) sets the stop flag the work polls (the explorer's
// progress callback, validate's ValidateOptions::stop), the worker is
// joined, and the handler's exception is raised.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <Python.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "app/scenarios.hpp"
#include "backend/common/out_of_memory.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/validate.hpp"
#if STRATA_HAVE_CUDA
#include "backend/cuda/executor.hpp"
#include "backend/cuda/process_group.hpp"
#endif
#include "costmodel/model_io.hpp"
#include "report/describe.hpp"
#include "report/explore.hpp"
#include "report/export.hpp"
#include "report/files.hpp"
#include "report/format.hpp"
#include "report/html_report.hpp"
#include "report/simulate.hpp"
#include "sim/error.hpp"
#include "sim/json_reader.hpp"
#include "sim/names.hpp"
#include "strategies/scenario.hpp"
#include "strategies/stack.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace strata;

// Where a scenario (or model) comes from: a file, or JSON text (a dict or a
// string on the Python side) named `source` in errors, its relative paths
// resolved against `base_dir`.
struct Source {
  std::optional<std::string> path;
  std::string text, source, base_dir;
  const std::string& name() const { return path ? *path : source; }
};

// The scenario as the commands read it (app/scenarios.hpp).
strategies::Scenario load(const Source& s) {
  if (s.path) return app::load_scenario_file(*s.path);
  return app::load_scenario_text(s.text, s.source, s.base_dir);
}

template <class E>
E name_to(const std::string& name, const char* what) {
  if (auto v = enum_from_name<E>(name)) return *v;
  throw InputError(what, "", "must be one of " + enum_choices<E>() + " (got \"" + name + "\")");
}

// Thrown from the explorer's progress callback once a signal asked to stop.
struct Stopped {};

// Runs f() on a worker thread, the GIL released, while this thread checks
// for signals (module comment). `stop` is what f polls. `tick`, when given,
// runs on this thread with the GIL every 50 ms and once after f ends (a
// Python progress callback); an exception it raises stops f as a signal does.
template <class F>
auto interruptible(std::atomic<bool>& stop, F&& f, const std::function<void()>& tick = {}) -> decltype(f()) {
  using R = decltype(f());
  std::optional<R> result;
  std::exception_ptr error;
  std::optional<nb::python_error> raised;
  {
    nb::gil_scoped_release release;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread worker([&] {
      try {
        result.emplace(f());
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mu);
      done = true;
      cv.notify_all();
    });
    for (;;) {
      {
        std::unique_lock lock(mu);
        if (cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; })) break;
      }
      if (stop.load()) continue;
      nb::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) {
        raised.emplace();  // fetches (and clears) the handler's exception
        stop.store(true);
      } else if (tick) {
        try {
          tick();
        } catch (nb::python_error& e) {
          raised.emplace(std::move(e));
          stop.store(true);
        }
      }
    }
    worker.join();
  }
  if (raised) throw *raised;
  if (tick && !error) tick();  // the last figures
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Stopped&) {
      throw std::runtime_error("stopped");  // stop is set only with `raised`: not reached
    }
  }
  return std::move(*result);
}

// --------------------------------------------------------------- calls --

std::string simulate(const Source& s, bool analytical, const std::string& granularity, const std::string& trace,
                     const std::string& format) {
  const auto f = name_to<report::Format>(format, "format");
  nb::gil_scoped_release release;
  if (granularity != "layer" && granularity != "chunk")
    throw InputError("granularity", "", "must be layer or chunk (got \"" + granularity + "\")");
  if (!trace.empty()) {
    if (s.path) report::require_output_apart(trace, "--trace", {*s.path});
    report::check_output_target(trace);
  }
  auto sc = load(s);
  app::require_plan(sc, "simulate", /*chain_models=*/true);
  // Nor a file the scenario names (its model, cluster, stack, convergence model, calibration).
  report::require_output_apart(trace, "--trace", app::scenario_inputs(sc));
  return report::simulate(sc, {.analytical = analytical, .chunk = granularity == "chunk", .trace = trace, .format = f});
}

// describe: what `strata describe` does with a model preset, a model file
// (Strata's or a Hugging Face config.json), a scenario file, or their JSON
// text (`scenario`: the text is a scenario's). Returns the rendering and
// the reader's notes.
std::tuple<std::string, std::vector<std::string>> describe(const std::optional<std::string>& target,
                                                           const Source& text, bool scenario,
                                                           const std::string& format) {
  const auto f = name_to<report::Format>(format, "format");
  nb::gil_scoped_release release;
  cost::ExpandOptions options;
  std::vector<std::string> notes;
  auto of_scenario = [&](const strategies::Scenario& s) {
    options.micro_batch = s.batch.micro;
    options.precision = s.plan.precision;
    options.attention = s.plan.implementation.attention;
    return report::describe(s.model, options, &s, f);
  };
  if (!target) {
    if (scenario) return {of_scenario(strategies::parse_scenario(text.text, text.source, text.base_dir)), notes};
    const auto model = cost::parse_model_file_text(text.text, text.source, &notes);
    return {report::describe(model, options, nullptr, f), notes};
  }
  if (cost::names_a_file(*target) || std::filesystem::exists(*target)) {
    app::require_file(*target);
    if (strategies::is_scenario_file(*target)) return {of_scenario(strategies::load_scenario(*target)), notes};
    const auto model = cost::load_model_file(*target, &notes);
    return {report::describe(model, options, nullptr, f), notes};
  }
  return {report::describe(cost::model_preset(*target), options, nullptr, f), notes};
}

std::string presets(const std::string& what, const std::string& format) {
  const auto f = name_to<report::Format>(format, "format");
  nb::gil_scoped_release release;
  if (what == "models") return report::list_models(cost::model_presets(), f);
  if (what == "gpus") return report::list_gpus(cost::gpu_presets(), f);
  if (what == "clusters") return report::list_clusters(cost::cluster_presets(), f);
  std::vector<strategies::Stack> stacks;
  for (const auto& n : strategies::stack_names()) stacks.push_back(strategies::bundled_stack(n));
  return report::list_stacks(stacks, f);
}

// explore: `strata explore`'s work; returns its JSON output and, when the
// report could not be written, why (the CLI's warning).
std::tuple<std::string, std::string> explore(const Source& s, const std::string& out_dir, int jobs, bool resume,
                                             std::uint64_t shard_index, std::uint64_t shard_count,
                                             std::size_t top_k, const std::optional<std::string>& rank_by,
                                             std::uint64_t max_plans, const std::string& format,
                                             const nb::object& progress, double progress_interval_s) {
  const auto f = name_to<report::Format>(format, "format");
  report::ExploreRunOptions o;
  o.out_dir = out_dir;
  o.resume = resume;
  o.jobs = jobs;
  o.shard_index = shard_index;
  o.shard_count = shard_count;
  o.top_k = top_k;
  if (rank_by) o.rank_by = name_to<strategies::RankBy>(*rank_by, "rank_by");
  o.max_plans = max_plans;
  if (shard_count < 1 || shard_index >= shard_count)
    throw InputError("shard", "", "needs n >= 1 and 0 <= i < n");
  std::atomic<bool> stop{false};
  // The explorer's latest figures, handed from its threads to the caller's
  // progress callback, which runs on the calling thread (a notebook's
  // widgets and tqdm bars expect that) at most every progress_interval_s.
  std::mutex latest_mu;
  std::optional<strategies::Progress> latest;
  o.progress_interval_s = 0.05;
  o.on_progress = [&](const strategies::Progress& p) {
    if (stop.load()) throw Stopped{};
    std::lock_guard lock(latest_mu);
    latest = p;
  };
  double shown_at = -1;
  std::function<void()> tick;
  if (!progress.is_none())
    tick = [&] {
      std::optional<strategies::Progress> p;
      {
        std::lock_guard lock(latest_mu);
        p = std::exchange(latest, std::nullopt);
      }
      if (!p) return;
      const bool last = p->to_score > 0 && p->scored == p->to_score;
      if (!last && shown_at >= 0 && p->elapsed_s - shown_at < progress_interval_s) {
        std::lock_guard lock(latest_mu);
        if (!latest) latest = p;  // kept for the next tick
        return;
      }
      shown_at = p->elapsed_s;
      nb::dict d;
      d["checked"] = p->checked;
      d["total"] = p->total;
      d["scored"] = p->scored;
      d["to_score"] = p->to_score;
      d["elapsed_s"] = p->elapsed_s;
      d["scoring_s"] = p->scoring_s;
      // Of the plans to score, by the explorer's cost estimate (its ETA's basis).
      d["fraction"] = p->cost_total > 0 ? p->cost_done / p->cost_total : 0.0;
      progress(d);
    };
  return interruptible(stop, [&] {
    const auto sc = load(s);
    const auto rep = report::run_explore(sc, o);
    std::string out = report::render_explore(rep.summary_json, &rep, f);
    std::string warning;
    try {
      // As the CLI's explore: of the records just written, not verified again.
      report::write_report(out_dir, out_dir, {}, /*verify=*/false);
    } catch (const std::exception& e) {
      warning = std::string("explore: no report: ") + e.what();
    }
    return std::tuple<std::string, std::string>{std::move(out), std::move(warning)};
  }, tick);
}

std::string write_report(const std::string& dir, const std::string& out_dir) {
  nb::gil_scoped_release release;
  return report::write_report(dir, out_dir);
}

// merge DIR... --out OUT: the shards combined (records verified, counts
// summed, front and top recomputed); what the CLI prints.
std::string merge(const std::vector<std::string>& dirs, const std::string& out_dir, const std::string& format) {
  const auto f = name_to<report::Format>(format, "format");
  nb::gil_scoped_release release;
  return report::render_explore(report::merge_explore(dirs, out_dir), nullptr, f);
}

// export: `strata export`'s work: the text, the choices the engine cannot
// express, the notes.
std::tuple<std::string, std::vector<std::string>, std::vector<std::string>> export_plan(
    const Source& s, const std::string& to, std::size_t rank, const std::string& scenario_override) {
  const auto target = name_to<report::ExportTarget>(to, "to");
  nb::gil_scoped_release release;
  strategies::Scenario sc;
  if (s.path) {
    sc = report::load_export_scenario(*s.path, rank, scenario_override);
  } else {
    if (rank != 1) throw InputError(s.source, "", "rank applies to an explore directory, not a scenario");
    sc = strategies::parse_scenario(s.text, s.source, s.base_dir);
    if (sc.space) strategies::require_valid_plan(sc);
  }
  strategies::require_transformer(sc, "export");
  auto ex = report::export_plan(sc, target);
  return {std::move(ex.text), std::move(ex.unsupported), std::move(ex.notes)};
}

// import FILE --from E --scenario BASE: the engine's settings (a file, or
// their text) back into a scenario on BASE; (scenario JSON, what came from
// BASE, what was ignored).
std::tuple<std::string, std::vector<std::string>, std::vector<std::string>> import_plan(
    const std::optional<std::string>& settings_path, const std::string& settings_text, const std::string& from,
    const Source& base) {
  const auto target = name_to<report::ExportTarget>(from, "from");
  nb::gil_scoped_release release;
  const strategies::Scenario sc = load(base);
  strategies::require_transformer(sc, "import");
  const std::string name = settings_path ? *settings_path : "<settings>";
  const std::string text = settings_path ? read_input_file(*settings_path, kMaxJsonFileBytes) : settings_text;
  auto im = report::import_plan(sc, target, text, name);
  strategies::require_valid_plan(im.scenario);
  const std::string base_text = base.path ? read_input_file(*base.path, kMaxJsonFileBytes) : base.text;
  return {report::imported_scenario_json(base_text, im, target), std::move(im.from_base), std::move(im.ignored)};
}

// validate --backend cpu|cuda: the plan run on the CPU executor, or on
// this process's GPU, and compared with the prediction; JSON (or table) as
// the CLI prints it.
std::string validate(const Source& s, std::size_t rank, const std::string& backend, int steps,
                     const std::string& calibration, const std::string& format) {
  const auto f = name_to<report::Format>(format, "format");
  if (f == report::Format::Csv) throw InputError("format", "", "validate prints table or json");
  if (backend != "cpu" && backend != "cuda")
    throw InputError("backend", "", "must be cpu or cuda (got \"" + backend + "\")");
#if !STRATA_HAVE_CUDA
  if (backend == "cuda")
    throw InputError("backend", "",
                     "cuda: this strata module was built without the CUDA backend (build it where the CUDA "
                     "toolkit and NCCL are found, e.g. `pip install . -C cmake.define.STRATA_CUDA=ON`), or "
                     "use `strata validate --backend cuda`");
#endif
  if (steps < 1) throw InputError("steps", "", "must be at least 1");
  std::atomic<bool> stop{false};
  return interruptible(stop, [&] {
    strategies::Scenario sc;
    if (s.path) {
      sc = app::load_plan_or_explored(*s.path, rank, "validate");
    } else {
      if (rank != 0) throw InputError(s.source, "", "rank applies to an explore directory, not a scenario");
      sc = app::load_scenario_text(s.text, s.source, s.base_dir);
      app::require_plan(sc, "validate");
    }
    backend::cpu::ValidateOptions options;
    options.steps = steps;
    options.stop = &stop;
    backend::cpu::ValidateReport rep;
    if (backend == "cuda") {
#if STRATA_HAVE_CUDA
      // One process on one GPU: a plan of several GPUs is refused (the
      // executor's rule names the launcher), and so is a module started by
      // mpirun or srun for several processes, whose failure would leave the
      // others waiting in a collective (the CLI ends them all instead).
      const auto launch = app::cuda_launch(sc, s.name());
      if (launch.world > 1)
        throw InputError("backend", "",
                         "cuda: the Python module validates in one process on one GPU; for " +
                             std::to_string(launch.world) + " processes, " + backend::cuda::launch_hint(launch.world));
      if (auto cal = app::cuda_calibration_path(calibration, sc, "validate")) sc.calibration = *cal;
      backend::cuda::ProcessGroup group(launch);
      backend::cuda::Executor ex(sc, {.seed = options.seed, .device = group.local_rank(), .group = &group});
      rep = backend::cpu::validate(sc, ex, options);
#endif
    } else {
      app::require_cpu_executor(sc, s.name());
      sc.calibration = app::cpu_calibration_path(calibration, sc);
      backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
      rep = backend::cpu::validate(sc, options);
    }
    return f == report::Format::Json ? backend::cpu::render_validate_json(rep)
                                     : backend::cpu::render_validate_table(rep);
  });
}

// Raises strata._errors.<cls>(message, *args).
template <class... A>
void raise_python(const char* cls, const std::string& message, const A&... args) {
  nb::object type = nb::module_::import_("strata._errors").attr(cls);
  nb::object value = type(message, args...);
  PyErr_SetObject(type.ptr(), value.ptr());
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "Strata's libraries, linked (docs/python.md); use the package `strata`, not this module.";

  nb::class_<Source>(m, "Source")
      .def(nb::init<>())
      .def_rw("path", &Source::path)
      .def_rw("text", &Source::text)
      .def_rw("source", &Source::source)
      .def_rw("base_dir", &Source::base_dir);

  m.def("simulate", &simulate, "source"_a, "analytical"_a, "granularity"_a, "trace"_a, "format"_a);
  m.def("describe", &describe, "target"_a.none(), "text"_a, "scenario"_a, "format"_a);
  m.def("presets", &presets, "what"_a, "format"_a);
  m.def("explore", &explore, "source"_a, "out_dir"_a, "jobs"_a, "resume"_a, "shard_index"_a, "shard_count"_a,
        "top_k"_a, "rank_by"_a.none(), "max_plans"_a, "format"_a, "progress"_a.none(), "progress_interval_s"_a);
  m.def("write_report", &write_report, "dir"_a, "out_dir"_a);
  m.def("merge", &merge, "dirs"_a, "out_dir"_a, "format"_a);
  m.def("export", &export_plan, "source"_a, "to"_a, "rank"_a, "scenario"_a);
  m.def("import_plan", &import_plan, "settings_path"_a.none(), "settings_text"_a, "from_"_a, "scenario"_a);
  m.def("validate", &validate, "source"_a, "rank"_a, "backend"_a, "steps"_a, "calibration"_a, "format"_a);
  m.attr("default_max_plans") = strategies::kDefaultMaxPlans;
  m.attr("has_cuda") = STRATA_HAVE_CUDA != 0;  // built with the CUDA backend: validate(backend="cuda")
  m.attr("version") = STRATA_VERSION;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputError& e) {
      raise_python("InputError", e.what(), e.file(), e.path(), e.rule());
    } catch (const std::filesystem::filesystem_error& e) {
      // As the CLI reports it: bad input, named by the system.
      const std::string file = e.path1().string(), why = e.code().message();
      raise_python("InputError", file + ": " + why, file, std::string(), why);
    } catch (const backend::StepOutOfMemory& e) {
      raise_python("OutOfMemoryError", e.what());
    } catch (const Error& e) {
      raise_python("Error", e.what());
    }
  });
}
