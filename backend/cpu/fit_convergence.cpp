#include "backend/cpu/fit_convergence.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "backend/common/corpus.hpp"
#include "backend/cpu/executor.hpp"
#include "backend/cpu/gpt.hpp"
#include "backend/cpu/host_info.hpp"
#include "backend/common/rng.hpp"
#include "sim/error.hpp"
#include "strategies/validate.hpp"

namespace strata::backend::cpu {

namespace {

using strategies::FitRun;
using strategies::FitSetting;
using strategies::Scenario;

// The held-out sequences, and the loss the corpus's own model gets on them.
struct EvalSet {
  std::int64_t sequences = 0;
  std::vector<std::int32_t> tokens, targets;
  double best_loss = 0;
};

EvalSet make_eval_set(const MarkovCorpus& corpus, std::int64_t sequences, std::int64_t seq,
                      std::uint64_t seed) {
  EvalSet e;
  e.sequences = sequences;
  const auto n = static_cast<std::size_t>(sequences * seq);
  e.tokens.resize(n);
  e.targets.resize(n);
  Rng rng(seed ^ 0xe7a15e7ULL);
  corpus.sample(e.tokens, e.targets, sequences, seq, rng);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum -= std::log(corpus.transition(e.tokens[i], e.targets[i]));
  e.best_loss = sum / static_cast<double>(n);
  return e;
}

// The scenario at global batch B with a setting applied; with pp 1 each
// rank takes its B/dp sequences as one microbatch. An asynchronous schedule
// makes a scenario without a pipeline one of 2 stages.
Scenario run_scenario(const Scenario& sc, const FitSetting& s, std::int64_t batch) {
  Scenario r = sc;
  r.space.reset();
  r.goal.reset();
  r.batch.global = batch;
  if (sc.plan.pp == 1 && batch % sc.plan.dp == 0) r.batch.micro = batch / sc.plan.dp;
  if (!s.baseline()) {
    r.plan.compression = s.compression;
    if (s.optimizer) r.plan.optimizer = *s.optimizer;
    if (s.schedule) {  // two pipeline stages, on as many more ranks
      r.plan.schedule = *s.schedule;
      if (r.plan.pp == 1) r.plan.pp = 2;
      r.plan.stage_layers.clear();
      r.cluster.node.gpus_per_node = r.plan.gpus();
      r.cluster.nodes = 1;
    }
  }
  return r;
}

// Why the executor cannot train this point, or nothing.
std::optional<std::string> cannot_run(const Scenario& r) {
  if (auto v = strategies::first_violation(r)) return v->path + ": " + v->message;
  return Executor::unsupported(r);
}

// Trains until the held-out loss reaches every target or `cap` steps;
// nothing when `stop` is set before then (the run is unfinished).
std::optional<std::vector<std::optional<double>>> steps_to_targets(
    const Scenario& r, const MarkovCorpus& corpus, const EvalSet& eval, const std::vector<double>& targets,
    double lr, std::uint64_t seed, std::int64_t cap, const std::atomic<bool>* stop) {
  Executor ex(r, {.seed = seed, .lr = static_cast<float>(lr)});
  TrackingAllocator alloc;
  GptModel judge(r.model, alloc, seed);
  auto held_out_loss = [&] {
    const auto params = ex.parameters();
    for (std::size_t i = 0; i < judge.names().size(); ++i) {
      const auto& v = params.at(judge.names()[i]);
      std::copy(v.begin(), v.end(), judge.params()[i].data());
    }
    return judge.loss(eval.tokens, eval.targets, eval.sequences);
  };
  const std::int64_t batch = r.batch.global;
  // Evaluating costs about a third of a step over eval.sequences: every
  // `every` steps keeps it near a third of the training.
  const std::int64_t every = std::max<std::int64_t>(1, (eval.sequences + batch - 1) / batch);
  std::vector<std::optional<double>> at(targets.size());
  const auto n = static_cast<std::size_t>(batch * r.model.seq_len);
  std::vector<std::int32_t> tokens(n), next(n);
  Rng rng(seed ^ 0x5eedULL);
  double prev_loss = held_out_loss();
  std::int64_t prev_step = 0;
  for (std::int64_t step = 1; step <= cap; ++step) {
    if (stop && stop->load()) return std::nullopt;
    corpus.sample(tokens, next, batch, r.model.seq_len, rng);
    ex.step(tokens, next);
    if (step % every != 0 && step != cap) continue;
    const double loss = held_out_loss();
    bool all = true;
    for (std::size_t k = 0; k < targets.size(); ++k) {
      if (!at[k] && loss <= targets[k]) {
        const double t = prev_loss > loss ? (prev_loss - targets[k]) / (prev_loss - loss) : 1.0;
        at[k] = static_cast<double>(prev_step) + std::clamp(t, 0.0, 1.0) * static_cast<double>(step - prev_step);
      }
      all = all && at[k].has_value();
    }
    if (all) break;
    prev_loss = loss;
    prev_step = step;
  }
  return at;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::vector<std::string> default_fit_settings() {
  return {"topk:0.01",  "topk:0.01:noef", "randomk:0.1",  "qsgd:2",
          "powersgd:1", "onebit",         "opt:adam8bit", "sched:pipedream-2bw"};
}

strategies::FitRecord fit_convergence(const Scenario& sc, const FitConvergenceOptions& o,
                                      const std::function<void(const std::string&)>& log) {
  using Clock = std::chrono::steady_clock;
  auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  if (o.batches.size() < 2) throw InputError("--batches", "", "needs at least two batch sizes");
  for (auto h : o.held_out)
    if (std::find(o.batches.begin(), o.batches.end(), h) == o.batches.end())
      throw InputError("--held-out", "", std::to_string(h) + " is not one of --batches");
  if (o.batches.size() - std::set<std::int64_t>(o.held_out.begin(), o.held_out.end()).size() < 2)
    throw InputError("--held-out", "", "leaves fewer than two batch sizes to fit");
  if (o.seeds < 1) throw InputError("--seeds", "", "must be >= 1");
  if (o.lr_grid.empty()) throw InputError("--lr-grid", "", "needs at least one multiplier");

  strategies::FitRecord rec;
  auto& in = rec.input;
  rec.scenario = sc.file.empty() ? sc.model.name : sc.file;
  in.settings.push_back(strategies::parse_fit_setting("none", "--settings"));
  const bool defaults = o.settings.empty();
  for (const auto& text : defaults ? default_fit_settings() : o.settings) {
    FitSetting s = strategies::parse_fit_setting(text, "--settings");
    if (s.baseline()) continue;
    for (const auto b : o.batches) {
      if (auto why = cannot_run(run_scenario(sc, s, b))) {
        if (!defaults) throw InputError("--settings", "", "\"" + text + "\" at batch " + std::to_string(b) + ": " + *why);
        rec.skipped.push_back(text + ": " + *why);
        s.name.clear();
        break;
      }
    }
    if (!s.name.empty() && (!defaults || in.settings.size() <= o.max_default_settings))
      in.settings.push_back(s);
  }
  for (const auto b : o.batches)
    if (auto why = cannot_run(run_scenario(sc, in.settings.front(), b)))
      throw InputError(sc.file, "batch", "batch " + std::to_string(b) + ": " + *why);
  // Nothing trains that would not fit in the host's memory.
  const Bytes host = host_info().memory_bytes;
  for (const auto& s : in.settings)
    for (const auto b : o.batches) Executor::require_host_memory(run_scenario(sc, s, b), host);

  const MarkovCorpus corpus(sc.model.vocab, o.corpus_seed, o.sharpness);
  const EvalSet eval = make_eval_set(corpus, o.eval_sequences, sc.model.seq_len, o.corpus_seed);
  rec.entropy_rate = corpus.entropy_rate();
  rec.eval_sequences = o.eval_sequences;
  char data[160];
  std::snprintf(data, sizeof data, "Markov corpus (vocab %lld, seed %llu, sharpness %g)",
                static_cast<long long>(sc.model.vocab), static_cast<unsigned long long>(o.corpus_seed),
                o.sharpness);
  rec.data = data;
  // Targets to four decimals, so a scenario can name the fitted one.
  auto target = [&](double offset) { return std::round((eval.best_loss + offset) * 1e4) / 1e4; };
  std::vector<double> targets{target(o.target_offset)};
  for (double off : o.scaling_offsets) targets.push_back(target(off));
  in.target_losses = targets;
  in.loss_floor = eval.best_loss;
  in.seq_len = sc.model.seq_len;
  in.held_out = o.held_out;

  const double b0 = static_cast<double>(*std::min_element(o.batches.begin(), o.batches.end()));
  // After a stop request no run starts and the unfinished one is dropped.
  auto run = [&](const FitSetting& s, std::int64_t b, double lr, std::int64_t cap) {
    const Scenario r = run_scenario(sc, s, b);
    for (int seed = 1; seed <= o.seeds && !rec.stopped; ++seed) {
      const auto t0 = Clock::now();
      FitRun fr{s.name, b, lr, static_cast<std::uint64_t>(seed), cap, {}};
      auto steps = steps_to_targets(r, corpus, eval, targets, lr, fr.seed, cap, o.stop);
      if (!steps) {
        rec.stopped = true;
        say("fit-convergence: " + s.name + ", batch " + std::to_string(b) + ", seed " + std::to_string(seed) +
            ": stopped (dropped)");
        break;
      }
      fr.steps = std::move(*steps);
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      say("fit-convergence: " + s.name + ", batch " + std::to_string(b) + ", lr " + fmt("%.3g", lr) +
          ", seed " + std::to_string(seed) + ": " +
          (fr.steps[0] ? fmt("%.1f", *fr.steps[0]) + " steps" : "not reached in " + std::to_string(cap) + " steps") +
          " (" + fmt("%.1f", secs) + " s)");
      in.runs.push_back(std::move(fr));
    }
  };

  const FitSetting& base = in.settings.front();
  for (const auto b : o.batches) {
    if (rec.stopped) break;
    const double centre = strategies::lr_at_batch({o.lr, o.lr_scaling, 0, {}}, static_cast<double>(b), b0);
    std::vector<double> grid = o.lr_grid;
    std::sort(grid.begin(), grid.end());
    std::map<double, double> mean;  // multiplier -> mean steps
    double best = std::numeric_limits<double>::infinity();
    auto attempt = [&](double mult) {
      const double lr = centre * mult;
      const auto cap = std::isfinite(best) ? std::min<std::int64_t>(o.max_steps, static_cast<std::int64_t>(std::ceil(2 * best)))
                                           : o.max_steps;
      run(base, b, lr, cap);
      if (rec.stopped) return;
      mean[mult] = strategies::mean_steps_to_target(in, base.name, b, lr);
      best = std::min(best, mean[mult]);
    };
    for (double m : grid) attempt(m);
    // A winner at an end of the grid: one more step of 2x beyond it, twice at most.
    for (int extra = 0; extra < 2 && grid.size() > 1 && !rec.stopped; ++extra) {
      const auto win = std::min_element(mean.begin(), mean.end(),
                                        [](const auto& a, const auto& c) { return a.second < c.second; });
      if (!std::isfinite(win->second)) break;
      double next = 0;
      if (win->first == mean.begin()->first) next = win->first / 2;
      else if (win->first == mean.rbegin()->first) next = win->first * 2;
      else break;
      attempt(next);
    }
  }
  for (std::size_t i = 1; i < in.settings.size(); ++i) {
    const FitSetting& s = in.settings[i];
    for (const auto b : o.batches) {
      if (rec.stopped) break;
      const double lr = *strategies::best_lr(in, b);
      const double base_steps = strategies::mean_steps_to_target(in, base.name, b, lr);
      const auto cap = std::isfinite(base_steps)
                           ? std::min<std::int64_t>(o.max_steps, static_cast<std::int64_t>(std::ceil(o.setting_cap * base_steps)))
                           : o.max_steps;
      run(s, b, lr * s.lr_multiplier, cap);
    }
  }
  if (!rec.stopped) refit(sc, rec, o.base);
  return rec;
}

void refit(const Scenario& sc, strategies::FitRecord& rec, const strategies::ConvergenceModel& base) {
  auto& in = rec.input;
  std::set<std::int64_t> batches;
  std::uint64_t seeds = 0;
  for (const auto& r : in.runs) {
    batches.insert(r.batch);
    seeds = std::max(seeds, r.seed);
  }
  std::string list;
  for (auto b : batches) list += (list.empty() ? "" : ", ") + std::to_string(b);
  in.optimizer = sc.plan.optimizer;
  in.base = base;
  in.source = sc.model.name + " on the CPU backend, " + rec.data + ", dp " + std::to_string(sc.plan.dp) + ", " +
              std::string(enum_name(sc.plan.optimizer)) + ", target " +
              fmt("%.3g", in.target_losses.front() - in.loss_floor) + " nats above the best held-out loss, " +
              std::to_string(seeds) + " seed" + (seeds > 1 ? "s" : "");
  rec.outcome = strategies::fit_convergence_model(in);
  rec.outcome.model.description = "fitted by strata fit-convergence: " + in.source + "; batches " + list +
                                  " sequences of " + std::to_string(sc.model.seq_len) + " tokens";
}

}  // namespace strata::backend::cpu
