#include "backend/common/train.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/common/corpus.hpp"
#include "backend/common/out_of_memory.hpp"
#include "backend/common/rng.hpp"
#include "sim/error.hpp"
#include "sim/json_reader.hpp"
#include "sim/trace.hpp"
#include "lowering/step_costs.hpp"
#include "sim/text.hpp"

namespace strata::backend {

namespace {

constexpr sim::MemTag kTags[] = {MemTag::Params,      MemTag::Grads,       MemTag::OptimizerStates,
                                 MemTag::Activations, MemTag::CommBuffers, MemTag::Workspace,
                                 MemTag::Other};

void take_peaks(MemoryStats& into, const MemoryStats& step) {
  for (std::size_t t = 0; t < sim::kMemTagCount; ++t) into.peak[t] = std::max(into.peak[t], step.peak[t]);
  into.peak_total = std::max(into.peak_total, step.peak_total);
  into.current = step.current;
  into.current_total = step.current_total;
  into.allocations = step.allocations;
}

double median_step(const TrainReport& r) {
  std::vector<double> t;
  for (const auto& s : r.steps) t.push_back(s.seconds);
  if (t.empty()) return 0;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string mib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

void check_train_options(const strategies::Scenario& sc, const TrainOptions& opts) {
  if (opts.steps < 1) throw InputError("--steps", "", "must be >= 1");
  // A byte-level file needs the model's vocabulary to be 256.
  if (!opts.data.empty() && sc.model.vocab != ByteCorpus::kVocab)
    throw InputError(sc.file, "model.vocab",
                     "--data reads byte-level tokens: the model's vocabulary must be 256 (is " +
                         std::to_string(sc.model.vocab) + ")");
  // Before anything is built: a regular file (a FIFO would hang, a device
  // never end) of at most ByteCorpus::kMaxBytes, holding one window.
  if (opts.data.empty()) return;
  const std::uint64_t bytes = require_input_file(opts.data, ByteCorpus::kMaxBytes);
  if (bytes < static_cast<std::uint64_t>(sc.model.seq_len + 1))
    throw InputError(opts.data, "",
                     "training data of " + std::to_string(bytes) +
                         " bytes is shorter than one training window (seq_len + 1 = " +
                         std::to_string(sc.model.seq_len + 1) + " bytes)");
}

TrainReport train(const strategies::Scenario& sc, StepExecutor& ex, const TrainOptions& opts,
                  const std::function<void(const TrainStep&)>& on_step) {
  check_train_options(sc, opts);
  TrainReport r;
  r.backend = std::string(ex.backend());
  r.scenario = sc.file.empty() ? sc.model.name : sc.file;
  r.cluster = sc.cluster.name;
  r.dp = sc.plan.dp;
  r.tp = sc.plan.tp;
  r.pp = sc.plan.pp;
  r.global_batch = sc.batch.global;
  r.seq_len = sc.model.seq_len;

  std::optional<MarkovCorpus> markov;
  std::optional<ByteCorpus> bytes;
  if (opts.data.empty()) {
    markov.emplace(sc.model.vocab, opts.seed, opts.markov_sharpness);
    r.best_loss = markov->entropy_rate();
    char buf[160];
    std::snprintf(buf, sizeof buf, "Markov corpus (vocab %lld, seed %llu, sharpness %g)",
                  static_cast<long long>(sc.model.vocab), static_cast<unsigned long long>(opts.seed),
                  opts.markov_sharpness);
    r.data = buf;
  } else {
    bytes.emplace(ByteCorpus::from_file(opts.data));
    r.data = opts.data + " (bytes)";
  }

  r.ranks = ex.ranks();
  r.tasks_per_step = static_cast<std::int64_t>(ex.lowered().graph.num_tasks());
  strategies::Scenario as_run = sc;  // steps one after another, as the executor runs them
  as_run.executed = true;
  as_run.serial_ranks = ex.serial_ranks();
  r.predicted_step_s = to_seconds(strategies::predict_step(as_run).step_time);
  r.memory.resize(static_cast<std::size_t>(r.ranks));
  r.steps_asked = opts.steps;

  const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
  std::vector<std::int32_t> tokens(n), targets(n);
  Rng rng(opts.seed ^ 0x5eedULL);
  for (int s = 1; s <= opts.steps; ++s) {
    if (markov)
      markov->sample(tokens, targets, sc.batch.global, sc.model.seq_len, rng);
    else
      bytes->sample(tokens, targets, sc.batch.global, sc.model.seq_len, rng);
    StepResult res;
    try {
      res = ex.step(tokens, targets);
    } catch (const OutOfMemory& e) {
      throw StepOutOfMemory("run: step " + std::to_string(s) + ": " + out_of_memory_report(e, sc));
    }
    r.steps.push_back({s, res.loss, res.seconds});
    for (const auto& m : res.memory) {
      auto& into = r.memory[static_cast<std::size_t>(m.rank)];
      into.rank = m.rank;
      into.stage = m.stage;
      take_peaks(into.device, m.device);
      take_peaks(into.host, m.host);
    }
    if (on_step) on_step(r.steps.back());
    const bool stop = s < opts.steps && opts.stop && opts.stop->load();
    if (opts.trace && (s == opts.steps || stop)) r.trace = sim::chrome_trace(ex.lowered().graph, ex.measured(res));
    if (stop) {
      r.stopped = true;
      break;
    }
  }
  return r;
}

std::string render_train_table(const TrainReport& r) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "run: %s on %s, backend %s: %d %s (dp %lld x tp %lld x pp %lld), global batch %lld "
                "x %lld tokens\n",
                r.scenario.c_str(), r.cluster.c_str(), r.backend.c_str(), r.ranks,
                r.backend == "cpu" ? "rank threads" : "ranks", static_cast<long long>(r.dp), static_cast<long long>(r.tp),
                static_cast<long long>(r.pp), static_cast<long long>(r.global_batch),
                static_cast<long long>(r.seq_len));
  out += buf;
  out += "data: " + r.data;
  if (r.best_loss) {
    std::snprintf(buf, sizeof buf, "; best achievable loss (entropy rate) %.4f nats/token", *r.best_loss);
    out += buf;
  }
  if (r.stopped) {
    std::snprintf(buf, sizeof buf, "\nstopped by a signal after %zu of %d steps", r.steps.size(), r.steps_asked);
    out += buf;
  }
  out += "\n\nstep  loss     step_time_ms\n";
  for (const auto& s : r.steps) {
    std::snprintf(buf, sizeof buf, "%-5d %-8.4f %.2f\n", s.step, s.loss, s.seconds * 1e3);
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nmedian step time %.2f ms measured; %.2f ms predicted by the simulator for the "
                "same task graph (%lld tasks)\n",
                median_step(r) * 1e3, r.predicted_step_s * 1e3, static_cast<long long>(r.tasks_per_step));
  out += buf;
  out += "\npeak memory per rank (MiB; device pool by tag, and the host pool)\n";
  out += "rank  stage  peak     params   grads    optim    activ    comm     workspace  host\n";
  for (const auto& m : r.memory) {
    auto tag = [&](MemTag t) { return mib(m.device.peak[static_cast<std::size_t>(t)]); };
    std::snprintf(buf, sizeof buf, "%-5d %-6d %-8s %-8s %-8s %-8s %-8s %-8s %-10s %s\n", m.rank, m.stage,
                  mib(m.device.peak_total).c_str(), tag(MemTag::Params).c_str(),
                  tag(MemTag::Grads).c_str(), tag(MemTag::OptimizerStates).c_str(),
                  tag(MemTag::Activations).c_str(), tag(MemTag::CommBuffers).c_str(),
                  tag(MemTag::Workspace).c_str(), mib(m.host.peak_total).c_str());
    out += buf;
  }
  return out;
}

std::string render_train_json(const TrainReport& r) {
  nlohmann::ordered_json j;
  j["scenario"] = sim::utf8_escaped(r.scenario);
  j["cluster"] = r.cluster;
  j["backend"] = r.backend;
  j["data"] = sim::utf8_escaped(r.data);
  j["best_loss"] = r.best_loss ? nlohmann::ordered_json(*r.best_loss) : nlohmann::ordered_json(nullptr);
  j["ranks"] = r.ranks;
  j["dp"] = r.dp;
  j["tp"] = r.tp;
  j["pp"] = r.pp;
  j["global_batch"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  j["tasks_per_step"] = r.tasks_per_step;
  j["predicted_step_time_s"] = r.predicted_step_s;
  j["steps_asked"] = r.steps_asked;
  j["stopped"] = r.stopped;  // by a signal, after the steps below
  auto& steps = j["steps"] = nlohmann::ordered_json::array();
  for (const auto& s : r.steps) steps.push_back({{"step", s.step}, {"loss", s.loss}, {"step_time_s", s.seconds}});
  j["median_step_time_s"] = median_step(r);
  Bytes most = 0;
  for (const auto& m : r.memory) most = std::max(most, m.device.peak_total);
  j["peak_memory_bytes"] = most;
  auto& ranks = j["memory_per_rank"] = nlohmann::ordered_json::array();
  for (const auto& m : r.memory) {
    nlohmann::ordered_json tags;
    for (MemTag t : kTags) tags[std::string(enum_name(t))] = m.device.peak[static_cast<std::size_t>(t)];
    ranks.push_back({{"rank", m.rank},
                     {"stage", m.stage},
                     {"peak_bytes", m.device.peak_total},
                     {"peak_bytes_by_tag", tags},
                     {"host_peak_bytes", m.host.peak_total}});
  }
  return j.dump(2) + "\n";
}

}  // namespace strata::backend
