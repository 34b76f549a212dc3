#include "backend/common/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/common/out_of_memory.hpp"
#include "backend/common/rng.hpp"
#include "costmodel/time_model.hpp"
#include "sim/engine.hpp"
#include "sim/error.hpp"
#include "sim/memory.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"
#include "sim/text.hpp"

namespace strata::backend {

using strategies::TaskOp;

namespace {

constexpr std::array<std::string_view, kWorkKinds> kKindNames{
    "forward", "backward", "recompute", "collective", "p2p", "copy", "optimizer", "framework",
    "compression"};

// The tags a rank thread holds (Runtime and AllocatorReserve are the GPU
// model's only).
constexpr sim::MemTag kTags[] = {sim::MemTag::Params,      sim::MemTag::Grads,
                                 sim::MemTag::OptimizerStates, sim::MemTag::Activations,
                                 sim::MemTag::CommBuffers, sim::MemTag::Workspace,
                                 sim::MemTag::Other};

std::size_t idx(sim::MemTag t) { return static_cast<std::size_t>(t); }

std::string mib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

std::string pct(double predicted, double measured) {
  if (!(measured != 0)) return predicted == 0 ? "0.0 %" : "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", 100.0 * (predicted - measured) / measured);
  return buf;
}

// The predicted device pool of one stage as the executor holds it: every
// tag's peak and the peak of their sum, without the runtime and (unless
// the executor holds a GPU library workspace) the static workspace.
// Returns the left-out byte counts (runtime, workspace).
std::pair<Bytes, Bytes> predicted_pool(const sim::TaskGraph& g, const sim::RunResult& run, int stage,
                                       bool with_workspace, RankPeaks& out) {
  const sim::PoolId pool = g.pool("s" + std::to_string(stage) + ".gpu");
  const auto& usage = run.at(pool);
  Bytes runtime = 0, workspace = 0;
  for (const auto& pt : sim::tag_timeline(g, pool, usage)) {
    runtime = std::max(runtime, pt.by_tag[idx(sim::MemTag::Runtime)]);
    workspace = std::max(workspace, pt.by_tag[idx(sim::MemTag::Workspace)]);
    Bytes total = 0;
    for (sim::MemTag t : kTags) {
      if (t == sim::MemTag::Workspace && !with_workspace) continue;
      const Bytes b = pt.by_tag[idx(t)];
      out.by_tag[idx(t)] = std::max(out.by_tag[idx(t)], b);
      total += b;
    }
    out.peak = std::max(out.peak, total);
  }
  const sim::PoolId host = g.pool("s" + std::to_string(stage) + ".host");
  out.host_peak = run.at(host).peak;
  return {runtime, with_workspace ? 0 : workspace};
}

// The declared pools of one stage as an executor that runs the stage's
// tasks one at a time in program order holds them (the CPU executor's rank
// threads): each task's buffers live from its start, die at its end, and
// nothing overlaps.
void program_order_pool(const sim::TaskGraph& g, int stage, RankPeaks& out) {
  const sim::PoolId gpu = g.pool("s" + std::to_string(stage) + ".gpu");
  const sim::PoolId host = g.pool("s" + std::to_string(stage) + ".host");
  sim::TagBytes live{};
  Bytes host_live = 0;
  auto apply = [&](sim::BufferId id, Bytes sign) {
    const sim::Buffer& b = g.at(id);
    if (b.pool == gpu) live[idx(b.tag)] += sign * b.bytes;
    if (b.pool == host) host_live += sign * b.bytes;
  };
  auto note = [&] {
    Bytes total = 0;
    for (sim::MemTag t : kTags) {
      out.by_tag[idx(t)] = std::max(out.by_tag[idx(t)], live[idx(t)]);
      total += live[idx(t)];
    }
    out.peak = std::max(out.peak, total);
    out.host_peak = std::max(out.host_peak, host_live);
  };
  for (std::size_t b = 0; b < g.num_buffers(); ++b)
    if (g.at(sim::BufferId{static_cast<std::int32_t>(b)}).live_at_start) apply(sim::BufferId{static_cast<std::int32_t>(b)}, 1);
  note();
  for (const sim::Task& t : g.tasks()) {
    for (sim::BufferId b : t.allocs) apply(b, 1);
    note();
    for (sim::BufferId b : t.frees) apply(b, -1);
  }
}

void finish_side(ValidateSide& s) {
  for (const auto& r : s.ranks)
    if (r.peak >= s.peak_memory_bytes) s.peak_memory_bytes = r.peak;
  for (const auto& r : s.ranks)
    for (std::size_t t = 0; t < sim::kMemTagCount; ++t) s.peak_by_tag[t] = std::max(s.peak_by_tag[t], r.by_tag[t]);
}

}  // namespace

std::string_view work_kind_name(WorkKind k) { return kKindNames[static_cast<std::size_t>(k)]; }

WorkKind work_kind(TaskOp op) {
  switch (op) {
    case TaskOp::Framework: return WorkKind::Framework;
    case TaskOp::Forward: return WorkKind::Forward;
    case TaskOp::Backward: return WorkKind::Backward;
    case TaskOp::Recompute: return WorkKind::Recompute;
    case TaskOp::SendActivation:
    case TaskOp::SendGradient: return WorkKind::P2p;
    case TaskOp::LayerComm:
    case TaskOp::InputGather:
    case TaskOp::DpReduce:
    case TaskOp::PsPush:
    case TaskOp::PsPull:
    case TaskOp::EmbeddingTie:
    case TaskOp::Zero3Gather:
    case TaskOp::Zero3Reduce:
    case TaskOp::GatherWeights:
    case TaskOp::CompressRound: return WorkKind::Collective;
    case TaskOp::WeightFetch:
    case TaskOp::WeightFromNvme:
    case TaskOp::WeightsToNvme:
    case TaskOp::Offload:
    case TaskOp::Prefetch:
    case TaskOp::GradsToHost:
    case TaskOp::StatesFromNvme:
    case TaskOp::StatesToNvme:
    case TaskOp::WeightsToDevice: return WorkKind::Copy;
    case TaskOp::OptimizerStep: return WorkKind::Optimizer;
    case TaskOp::CompressEncode:
    case TaskOp::CompressDecode: return WorkKind::Compression;
  }
  return WorkKind::Framework;
}

void check_validate_options(const ValidateOptions& opts) {
  if (opts.steps < 1) throw InputError("--steps", "", "must be >= 1");
  if (opts.warmup < 0) throw InputError("--warmup", "", "must be >= 0");
}

ValidateReport validate(const strategies::Scenario& sc, StepExecutor& ex, const ValidateOptions& opts) {
  check_validate_options(opts);
  ValidateReport r;
  r.backend = std::string(ex.backend());
  r.scenario = sc.file.empty() ? sc.model.name : sc.file;
  r.cluster = sc.cluster.name;
  r.dp = sc.plan.dp;
  r.tp = sc.plan.tp;
  r.pp = sc.plan.pp;

  // Predicted, with the calibration the executor's lowering reads too, for
  // steps run one after another as the executor runs them.
  strategies::Scenario as_run = sc;
  as_run.executed = true;
  as_run.serial_ranks = ex.serial_ranks();
  const strategies::ModelStepCosts costs(as_run);
  const auto& cal = costs.calibration();
  r.calibration = cal.machine + " (" + cal.backend + ", " + cal.date + ")";
  sim::RunResult run;
  strategies::LoweredStep low;
  const auto pr = strategies::predict_step(as_run, costs, &run, &low);
  r.predicted.step_time_s = to_seconds(pr.step_time);

  // Measured.
  r.ranks = ex.ranks();
  const auto& xg = ex.lowered().graph;
  if (xg.num_tasks() != low.graph.num_tasks())
    throw Error("validate: the executor's task graph has " + std::to_string(xg.num_tasks()) +
                " tasks, the prediction's " + std::to_string(low.graph.num_tasks()));
  for (std::size_t i = 0; i < xg.tasks().size(); ++i)
    if (xg.tasks()[i].id != low.graph.tasks()[i].id)
      throw Error("validate: task " + std::to_string(i) + " is " + xg.tasks()[i].id +
                  " in the executor's graph and " + low.graph.tasks()[i].id + " in the prediction's");

  const auto n = static_cast<std::size_t>(sc.batch.global * sc.model.seq_len);
  std::vector<std::int32_t> tokens(n), targets(n);
  Rng rng(opts.seed ^ 0x5eedULL);
  const std::size_t tasks = low.graph.num_tasks();
  std::vector<double> task_sum(tasks, 0.0);
  std::vector<int> task_runs(tasks, 0);
  // Per measured step, for the schedule replay (below): each task's own time.
  std::vector<std::vector<double>> own_times;
  std::vector<double> last_start(tasks), last_end(tasks), step_sum(tasks);
  std::vector<int> step_runs(tasks);
  std::array<double, kWorkKinds> kind_sum{};
  double peer_wait_sum = 0;
  r.measured.ranks.resize(static_cast<std::size_t>(r.ranks));
  for (int s = 0; s < opts.warmup + opts.steps; ++s) {
    for (std::size_t i = 0; i < n; ++i) {
      tokens[i] = static_cast<std::int32_t>(rng.below(sc.model.vocab));
      targets[i] = static_cast<std::int32_t>(rng.below(sc.model.vocab));
    }
    StepResult res;
    try {
      res = ex.step(tokens, targets);
    } catch (const OutOfMemory& e) {
      throw StepOutOfMemory("validate: " + out_of_memory_report(e, sc));
    }
    if (s < opts.warmup) continue;
    r.step_times_s.push_back(res.seconds);
    for (const auto& m : res.memory) {
      auto& into = r.measured.ranks[static_cast<std::size_t>(m.rank)];
      into.rank = m.rank;
      into.stage = m.stage;
      into.peak = std::max(into.peak, m.device.peak_total);
      for (std::size_t t = 0; t < sim::kMemTagCount; ++t) into.by_tag[t] = std::max(into.by_tag[t], m.device.peak[t]);
      into.host_peak = std::max(into.host_peak, m.host.peak_total);
    }
    std::fill(last_start.begin(), last_start.end(), -1.0);
    std::fill(last_end.begin(), last_end.end(), -1.0);
    std::fill(step_sum.begin(), step_sum.end(), 0.0);
    std::fill(step_runs.begin(), step_runs.end(), 0);
    // One participant's span of a task in this step.
    auto take_part = [&](const TaskTime& t) {
      const auto i = static_cast<std::size_t>(t.task);
      last_start[i] = std::max(last_start[i], t.start);
      last_end[i] = std::max(last_end[i], t.end);
      step_sum[i] += t.end - t.start;
      ++step_runs[i];
    };
    for (const auto& t : res.tasks) {
      const auto i = static_cast<std::size_t>(t.task);
      task_sum[i] += t.end - t.start;
      ++task_runs[i];
      take_part(t);
    }
    // A pipeline receive is the transfer's other participant: it arrived
    // when it asked for the message and the transfer ended, for the
    // schedule, when the receiver held it (its wake-up included), not when
    // the sender had posted it.
    for (const auto& t : res.receipts) take_part(t);
    // A task's own time for the schedule replay: a collective or a pipeline
    // transfer runs once its last participant has arrived, and a rank that
    // arrived earlier waited inside it for the others — a wait the replayed
    // graph already has as the dependencies that hold the task back — so
    // its time is from the last arrival to the last end; any other task
    // takes its mean time over the ranks that ran it.
    auto& own = own_times.emplace_back(tasks, 0.0);
    for (std::size_t i = 0; i < tasks; ++i) {
      if (step_runs[i] == 0) continue;
      const WorkKind k = work_kind(low.info[i].op);
      own[i] = k == WorkKind::Collective || k == WorkKind::P2p ? std::max(0.0, last_end[i] - last_start[i])
                                                                : step_sum[i] / step_runs[i];
      // By kind, each rank's own time the same way: a collective's or
      // transfer's from its last participant's arrival; the rest of the
      // time its ranks spent in it was waiting for the others (a skew the
      // prediction, whose ranks are alike, does not have).
      const double own_sum = std::min(step_sum[i], own[i] * step_runs[i]);
      kind_sum[static_cast<std::size_t>(k)] += own_sum;
      peer_wait_sum += step_sum[i] - own_sum;
    }
    if (opts.stop && opts.stop->load() && s + 1 < opts.warmup + opts.steps) {
      r.stopped = true;
      break;
    }
  }
  r.steps_asked = opts.steps;
  r.measured.step_time_s = median(r.step_times_s);
  const auto measured_steps = static_cast<double>(r.step_times_s.size());
  for (std::size_t k = 0; k < kWorkKinds; ++k)
    r.measured.time_by_kind_s[k] = kind_sum[k] / (measured_steps * r.ranks);
  r.measured_peer_wait_s = peer_wait_sum / (measured_steps * r.ranks);
  finish_side(r.measured);

  // Predicted per rank (each rank as its stage's representative) and per kind.
  std::vector<RankPeaks> stage_peaks(static_cast<std::size_t>(low.stages));
  for (int s = 0; s < low.stages; ++s) {
    stage_peaks[static_cast<std::size_t>(s)].stage = s;
    if (sc.kernel_memory == strategies::KernelMemory::Cpu) {
      // The program declares the CPU kernels' buffers, which its executor
      // allocates task by task in program order: the peaks are those of
      // that order (no lane overlaps another), and what only a GPU holds
      // (the CUDA runtime, cuBLAS's workspace) is not declared at all.
      program_order_pool(low.graph, s, stage_peaks[static_cast<std::size_t>(s)]);
      const strategies::MemoryRules rules;
      r.excluded_runtime_bytes = rules.runtime_bytes;
      r.excluded_workspace_bytes = rules.cublas_workspace_bytes;
      continue;
    }
    const auto [rt, ws] = predicted_pool(low.graph, run, s, ex.holds_gpu_workspace(),
                                         stage_peaks[static_cast<std::size_t>(s)]);
    r.excluded_runtime_bytes = std::max(r.excluded_runtime_bytes, rt);
    r.excluded_workspace_bytes = std::max(r.excluded_workspace_bytes, ws);
  }
  for (const auto& m : r.measured.ranks) {
    RankPeaks p = stage_peaks.at(static_cast<std::size_t>(m.stage));
    p.rank = m.rank;
    r.predicted.ranks.push_back(p);
  }
  finish_side(r.predicted);
  std::array<double, kWorkKinds> pk{};
  for (std::size_t i = 0; i < tasks; ++i) {
    const auto& task = low.graph.tasks()[i];
    const double d = to_seconds(run.tasks[i].end - run.tasks[i].start);
    pk[static_cast<std::size_t>(work_kind(low.info[i].op))] += d;
    TaskRow row;
    row.id = task.id;
    row.kind = work_kind(low.info[i].op);
    row.stage = task.label.stage ? *task.label.stage : 0;
    row.predicted_s = d;
    row.measured_s = task_runs[i] > 0 ? task_sum[i] / task_runs[i] : 0;
    r.tasks.push_back(std::move(row));
  }
  // Each stage's representative stands for its dp ranks: the mean over
  // ranks is the mean over stages.
  for (std::size_t k = 0; k < kWorkKinds; ++k) r.predicted.time_by_kind_s[k] = pk[k] / std::max(1, low.stages);

  // The schedule check: the same graph, every task at its time in one
  // measured step; the median over the steps, as the measured step's.
  for (std::size_t i = 0; i < tasks; ++i)
    if (task_runs[i] == 0) ++r.replay_untimed_tasks;
  sim::TaskGraph replay = low.graph;
  std::vector<double> replayed;
  for (const auto& own : own_times) {
    for (std::size_t i = 0; i < tasks; ++i)
      replay.replace_time(sim::TaskId{static_cast<std::int32_t>(i)}, cost::seconds_to_time(own[i]));
    replayed.push_back(to_seconds(sim::simulate(replay).makespan));
  }
  r.replayed_step_time_s = median(replayed);
  return r;
}

std::string render_validate_table(const ValidateReport& r) {
  std::string out;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "validate: %s on %s, backend %s: %d %s (dp %lld x tp %lld x pp %lld), %zu measured "
                "steps%s\ncalibration: %s\n\n",
                r.scenario.c_str(), r.cluster.c_str(), r.backend.c_str(), r.ranks,
                r.backend == "cpu" ? "rank threads" : "ranks", static_cast<long long>(r.dp), static_cast<long long>(r.tp),
                static_cast<long long>(r.pp), r.step_times_s.size(),
                r.stopped ? (" of " + std::to_string(r.steps_asked) + " asked (stopped by a signal)").c_str() : "",
                r.calibration.c_str());
  out += buf;
  out += "                     predicted      measured       error\n";
  std::snprintf(buf, sizeof buf, "step time (ms)       %-14.3f %-14.3f %s\n", r.predicted.step_time_s * 1e3,
                r.measured.step_time_s * 1e3, pct(r.predicted.step_time_s, r.measured.step_time_s).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "peak memory (MiB)    %-14s %-14s %s\n", mib(r.predicted.peak_memory_bytes).c_str(),
                mib(r.measured.peak_memory_bytes).c_str(),
                pct(static_cast<double>(r.predicted.peak_memory_bytes),
                    static_cast<double>(r.measured.peak_memory_bytes))
                    .c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "schedule replay (ms) %-14s %-14.3f %s   (measured task times through the engine%s)\n",
                "", r.replayed_step_time_s * 1e3, pct(r.replayed_step_time_s, r.measured.step_time_s).c_str(),
                r.replay_untimed_tasks > 0
                    ? (", " + std::to_string(r.replay_untimed_tasks) + " untimed tasks at 0").c_str()
                    : "");
  out += buf;
  out += "\ntime per step by task kind, per rank (ms; a collective or transfer from its last participant's arrival)\n";
  out += "kind         predicted      measured       error\n";
  for (std::size_t k = 0; k < kWorkKinds; ++k) {
    const double p = r.predicted.time_by_kind_s[k], m = r.measured.time_by_kind_s[k];
    if (p == 0 && m == 0) continue;
    std::snprintf(buf, sizeof buf, "%-12s %-14.3f %-14.3f %s\n", std::string(kKindNames[k]).c_str(), p * 1e3,
                  m * 1e3, pct(p, m).c_str());
    out += buf;
  }
  if (r.measured_peer_wait_s > 0) {
    std::snprintf(buf, sizeof buf, "%-12s %-14s %-14.3f (inside collectives and transfers, before the last participant arrived; ranks are alike in the prediction)\n",
                  "peer wait", "-", r.measured_peer_wait_s * 1e3);
    out += buf;
  }
  out += "\npeak memory per rank (bytes; each tag's own peak): predicted / measured\n";
  out += "rank  stage  total                   params                grads                 optimizer_states      activations             comm_buffers          workspace       host\n";
  for (std::size_t i = 0; i < r.measured.ranks.size(); ++i) {
    const auto& p = r.predicted.ranks[i];
    const auto& m = r.measured.ranks[i];
    auto pair = [](Bytes a, Bytes b) { return std::to_string(a) + "/" + std::to_string(b); };
    std::snprintf(buf, sizeof buf, "%-5d %-6d %-23s %-21s %-21s %-21s %-23s %-21s %-15s %s\n", m.rank, m.stage,
                  pair(p.peak, m.peak).c_str(), pair(p.by_tag[idx(sim::MemTag::Params)], m.by_tag[idx(sim::MemTag::Params)]).c_str(),
                  pair(p.by_tag[idx(sim::MemTag::Grads)], m.by_tag[idx(sim::MemTag::Grads)]).c_str(),
                  pair(p.by_tag[idx(sim::MemTag::OptimizerStates)], m.by_tag[idx(sim::MemTag::OptimizerStates)]).c_str(),
                  pair(p.by_tag[idx(sim::MemTag::Activations)], m.by_tag[idx(sim::MemTag::Activations)]).c_str(),
                  pair(p.by_tag[idx(sim::MemTag::CommBuffers)], m.by_tag[idx(sim::MemTag::CommBuffers)]).c_str(),
                  pair(p.by_tag[idx(sim::MemTag::Workspace)], m.by_tag[idx(sim::MemTag::Workspace)]).c_str(),
                  pair(p.host_peak, m.host_peak).c_str());
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nleft out of the predicted device pool (GPU-only): runtime %s MiB, cuBLAS workspace %s MiB\n",
                mib(r.excluded_runtime_bytes).c_str(), mib(r.excluded_workspace_bytes).c_str());
  out += buf;
  return out;
}

namespace {

nlohmann::ordered_json side_json(const ValidateSide& s) {
  nlohmann::ordered_json j;
  j["step_time_s"] = s.step_time_s;
  j["peak_memory_bytes"] = s.peak_memory_bytes;
  nlohmann::ordered_json tags;
  for (sim::MemTag t : kTags) tags[std::string(enum_name(t))] = s.peak_by_tag[idx(t)];
  j["memory_breakdown_bytes"] = tags;
  auto& ranks = j["memory_per_rank"] = nlohmann::ordered_json::array();
  for (const auto& r : s.ranks) {
    nlohmann::ordered_json rt;
    for (sim::MemTag t : kTags) rt[std::string(enum_name(t))] = r.by_tag[idx(t)];
    ranks.push_back({{"rank", r.rank},
                     {"stage", r.stage},
                     {"peak_bytes", r.peak},
                     {"peak_bytes_by_tag", rt},
                     {"host_peak_bytes", r.host_peak}});
  }
  nlohmann::ordered_json kinds;
  for (std::size_t k = 0; k < kWorkKinds; ++k) kinds[std::string(kKindNames[k])] = s.time_by_kind_s[k];
  j["time_by_kind_s"] = kinds;
  return j;
}

double rel(double p, double m) { return m != 0 ? (p - m) / m : 0.0; }

}  // namespace

std::string render_validate_json(const ValidateReport& r) {
  nlohmann::ordered_json j;
  j["scenario"] = sim::utf8_escaped(r.scenario);
  j["cluster"] = r.cluster;
  j["backend"] = r.backend;
  j["calibration"] = sim::utf8_escaped(r.calibration);
  j["ranks"] = r.ranks;
  j["dp"] = r.dp;
  j["tp"] = r.tp;
  j["pp"] = r.pp;
  j["steps"] = r.step_times_s.size();
  j["steps_asked"] = r.steps_asked;
  j["stopped"] = r.stopped;
  j["excluded_bytes"] = {{"runtime", r.excluded_runtime_bytes}, {"workspace", r.excluded_workspace_bytes}};
  j["predicted"] = side_json(r.predicted);
  j["measured"] = side_json(r.measured);
  j["errors"] = {{"step_time", rel(r.predicted.step_time_s, r.measured.step_time_s)},
                 {"peak_memory", rel(static_cast<double>(r.predicted.peak_memory_bytes),
                                     static_cast<double>(r.measured.peak_memory_bytes))}};
  j["step_times_s"] = r.step_times_s;
  j["measured_peer_wait_s"] = r.measured_peer_wait_s;
  j["replay"] = {{"step_time_s", r.replayed_step_time_s},
                 {"error", rel(r.replayed_step_time_s, r.measured.step_time_s)},
                 {"untimed_tasks", r.replay_untimed_tasks}};
  auto& tasks = j["tasks"] = nlohmann::ordered_json::array();
  for (const auto& t : r.tasks)
    tasks.push_back({{"id", t.id},
                     {"kind", std::string(kKindNames[static_cast<std::size_t>(t.kind)])},
                     {"stage", t.stage},
                     {"predicted_s", t.predicted_s},
                     {"measured_s", t.measured_s}});
  return j.dump(2) + "\n";
}

}  // namespace strata::backend
