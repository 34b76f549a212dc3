// strata fit-convergence SCENARIO --out FILE: train to target losses and fit
// the convergence model.
#include <cstdio>
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "app/common.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/fit_convergence.hpp"
#include "costmodel/model_io.hpp"
#include "report/convergence_fit.hpp"
#include "report/files.hpp"
#include "strategies/convergence_io.hpp"

namespace strata::app {

namespace {

struct FitArgs {
  std::string scenario;
  std::string out;    // the fitted convergence file
  std::string plot;   // SVG; empty: none
  std::string base;   // a bundled model's name or a file; empty: the bundled one
  std::string refit;  // an earlier output file to fit again; empty: train
  bool quick = false;
  bool markdown = false;
  backend::cpu::FitConvergenceOptions options;
  report::Format format = report::Format::Table;
};

// Writes the fitted file (and plot) and returns what to print; `signal`
// nonzero: a stopped fit, thrown as Interrupted once written.
std::string write_fit(const FitArgs& a, const strategies::FitRecord& rec, int signal) {
  const std::string file = report::fitted_convergence_json(rec);
  // Both or neither.
  std::vector<std::pair<std::string, std::string>> files{{a.out, file}};
  if (!a.plot.empty()) files.emplace_back(a.plot, report::fit_plot_svg(rec));
  report::write_files_atomically(files);
  std::cerr << "fit-convergence: wrote " << a.out << (a.plot.empty() ? "" : " and " + a.plot) << "\n";
  std::string out = a.format == report::Format::Json ? file : report::render_fit(rec, a.format, a.markdown);
  if (signal != 0) throw Interrupted{std::move(out), signal};
  return out;
}

// `cmd`: the parsed subcommand (--quick keeps the options given on the command line).
std::string fit_convergence(const FitArgs& a, const Subcommand& cmd) {
  // The outputs are checked before training (minutes): not an input, not
  // each other, paths the writer takes.
  for (const auto* out : {&a.out, &a.plot}) {
    if (out->empty()) continue;
    const std::string option = out == &a.out ? "--out" : "--plot";
    report::require_output_apart(*out, option, {a.scenario, a.base, a.refit, out == &a.plot ? a.out : ""});
    report::check_output_target(*out);
  }
  auto sc = load_plan_scenario(a.scenario, "fit-convergence");
  for (const auto* out : {&a.out, &a.plot})
    report::require_output_apart(*out, out == &a.out ? "--out" : "--plot", scenario_inputs(sc));
  auto o = a.options;
  if (a.quick) {
    if (!cmd.given("--batches")) o.batches = {4, 8, 16, 32};
    if (!cmd.given("--held-out")) o.held_out = {8};
    if (!cmd.given("--seeds")) o.seeds = 1;
    if (!cmd.given("--lr-grid")) o.lr_grid = {1};
    if (!cmd.given("--scaling-offsets")) o.scaling_offsets.clear();
    if (!cmd.given("--target-offset")) o.target_offset = 0.3;
    if (!cmd.given("--max-steps")) o.max_steps = 400;
    o.max_default_settings = 2;
  }
  if (a.base.empty()) {
    o.base = strategies::bundled_convergence();
  } else if (cost::names_a_file(a.base)) {
    require_file(a.base);
    o.base = strategies::load_convergence_file(a.base);
  } else {
    o.base = strategies::bundled_convergence(a.base);
  }
  strategies::FitRecord rec;
  if (!a.refit.empty()) {
    require_file(a.refit);
    rec = report::load_fit_record(a.refit);
    if (cmd.given("--held-out")) rec.input.held_out = o.held_out;
    backend::cpu::refit(sc, rec, o.base);
  } else {
    backend::cpu::set_blas_threads(1);  // one OpenBLAS thread per rank thread
    // Ctrl-C or SIGTERM ends the training at the next step: the run in
    // flight is dropped and the runs finished are fitted and written when
    // they can be (a note in the file says so); else nothing is written.
    // Either way the exit status is 128 + the signal.
    const StopOnSignal stop;
    o.stop = stop.flag();
    rec = backend::cpu::fit_convergence(sc, o, [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
    });
    if (rec.stopped) {
      const auto runs = rec.input.runs.size();
      try {
        backend::cpu::refit(sc, rec, o.base);
      } catch (const Error& e) {
        std::cerr << "fit-convergence: stopped after " << runs << " run" << (runs == 1 ? "" : "s")
                  << ", which cannot be fitted (" << e.what() << "); nothing written\n";
        throw Interrupted{"", stop.signal()};
      }
      rec.outcome.notes.push_back("stopped by signal " + std::to_string(stop.signal()) + " after " +
                                  std::to_string(runs) + " runs: the fit has fewer runs than asked for");
      return write_fit(a, rec, stop.signal());
    }
  }
  return write_fit(a, rec, 0);
}

std::string default_settings() {
  std::string d;
  for (const auto& x : backend::cpu::default_fit_settings()) d += (d.empty() ? "" : ",") + x;
  return d;
}

}  // namespace

Command add_fit_convergence(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto& o = a->options;
  Subcommand cmd(
      app, "fit-convergence",
      "Train the scenario's model on the CPU backend to target losses at several global batch sizes, "
      "with each compression setting and optimizer, and fit the convergence model (S_min, B_noise, "
      "penalties) to the steps measured; held-out batches give its error");
  cmd.option("SCENARIO", a->scenario, "A scenario JSON the CPU executor runs").required();
  cmd.option("--out", a->out, "Write the fitted convergence file to FILE").required().type_name("FILE");
  cmd.option("--plot", a->plot, "Write the measured steps and fitted curves as an SVG to FILE").type_name("FILE");
  cmd.flag("--quick", a->quick,
           "A few seconds: batches 4,8,16,32 (8 held out), one seed, no rate sweep, target 0.3 "
           "nats above the best loss, no loss scaling, two settings");
  cmd.option("--batches", o.batches, "Global batch sizes, sequences (default 2,4,8,16,32,64)").delimiter(',');
  cmd.option("--held-out", o.held_out, "Batches left out of the fit (default 4,16)").delimiter(',');
  cmd.option("--settings", o.settings,
             "Lossy settings besides the baseline: topk:RATIO[:noef], randomk:RATIO[:noef], qsgd:BITS, "
             "onebit, powersgd:RANK, opt:OPTIMIZER, sched:pipedream-2bw, each with an optional @LR_MULTIPLIER "
             "(default: " + default_settings() + ", those the executor runs)")
      .delimiter(',');
  cmd.option("--seeds", o.seeds, "Runs per point (default 2)").range(1, 100);
  cmd.option("--target-offset", o.target_offset, "Target: nats above the best held-out loss (default 0.05)")
      .range(1e-3, 10.0);
  cmd.option("--scaling-offsets", o.scaling_offsets, "More targets for the loss scaling (default 0.1,0.2)")
      .delimiter(',');
  cmd.option("--lr", o.lr, "Learning rate at the smallest batch (default 0.003)").range(1e-8, 10.0);
  enum_option<strategies::LrScaling>(cmd, "--lr-scaling", o.lr_scaling,
                                     "How the rate tried first moves from the smallest batch: " +
                                         enum_choices<strategies::LrScaling>() + " (default none)")
      .type_name("RULE");
  cmd.option("--lr-grid", o.lr_grid, "Multipliers of the rate tried at each batch (default 0.5,1,2)").delimiter(',');
  cmd.option("--max-steps", o.max_steps, "Steps per run at most (default 1500)").range(1, 10000000);
  cmd.option("--setting-cap", o.setting_cap,
             "A setting's run stops after this many times the baseline's steps (default 6)")
      .range(1.0, 1000.0);
  cmd.option("--base", a->base,
             "Convergence model whose penalties the unmeasured settings keep (default: the bundled one)")
      .type_name("NAME_OR_FILE");
  cmd.option("--refit", a->refit,
             "Fit the measurements of an earlier output FILE again, without training (--held-out may "
             "choose other batches)")
      .type_name("FILE");
  cmd.flag("--markdown", a->markdown, "Print the table as Markdown (docs/accuracy.md)");
  add_format_option(cmd, a->format);
  return {cmd.cli(), [a, cmd] { return fit_convergence(*a, cmd); }};
}

}  // namespace strata::app
