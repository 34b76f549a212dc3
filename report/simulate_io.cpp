#include <cstdio>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "report/simulate.hpp"
#include "report/fields_io.hpp"
#include "report/table.hpp"
#include "sim/text.hpp"
#include "strategies/rank_mesh.hpp"

namespace strata::report {

namespace {

using nlohmann::ordered_json;
using sim::MemTag;

std::string plan_summary(const strategies::Scenario& sc) {
  const auto& p = sc.plan;
  std::string s = "dp " + std::to_string(p.dp) + ", tp " + std::to_string(p.tp) + ", pp " +
                  std::to_string(p.pp);
  if (p.cp > 1) s += ", cp " + std::to_string(p.cp);
  if (p.ep > 1) s += ", ep " + std::to_string(p.ep);
  s += ", " + std::string(enum_name(p.schedule));
  if (p.virtual_stages > 1) s += " (v " + std::to_string(p.virtual_stages) + ")";
  if (p.zero > 0) s += ", ZeRO-" + std::to_string(p.zero);
  if (p.sequence_parallel) s += ", sequence parallel";
  s += ", recompute " + std::string(enum_name(p.recompute));
  if (const auto mods = strategies::recompute_modules_of(p); mods != cost::kDefaultRecomputeModules)
    s += " (" + cost::module_list(mods) + ")";
  s += ", " + std::string(enum_name(p.optimizer)) + " " + std::string(enum_name(p.precision));
  if (p.precision == cost::Precision::FP8) s += " (" + std::string(enum_name(p.fp8_recipe)) + " scaling)";
  if (p.precision == cost::Precision::FP4) s += " (NVFP4)";
  if (p.bf16_first_layers > 0 || p.bf16_last_layers > 0)
    s += " with the first " + std::to_string(p.bf16_first_layers) + " and last " + std::to_string(p.bf16_last_layers) +
         " blocks in bf16";
  if (p.optimizer_states != strategies::StateDtype::FP32)
    s += ", " + std::string(enum_name(p.optimizer_states)) + " optimizer statistics";
  if (p.offload.activations) s += ", offload activations";
  if (p.offload.weights)
    s += p.offload.weights_target == strategies::OffloadTarget::Nvme ? ", offload weights to NVMe" : ", offload weights";
  if (p.offload.optimizer != strategies::OffloadTarget::None)
    s += ", optimizer on " + std::string(enum_name(p.offload.optimizer));
  if (p.compression.method != strategies::CompressionMethod::None)
    s += ", " + std::string(enum_name(p.compression.method)) + " compression";
  return s;
}

std::string gib(Bytes b) { return fixed(to_GiB(b), 2) + " GiB"; }

// What each layer of stage s keeps (keeps_pattern: A, S, I, N) or moves
// to the host (swaps_pattern: -, H, L), its model chunks separated by "|"
// (a chunk holding only the embedding or the head: "0");
// `runs` writes runs as "3I 2S 1A".
template <class T>
std::string stage_layers(const strategies::Scenario& sc, const std::vector<T>& choices, int s,
                         bool runs) {
  const auto chunks = strategies::chunk_layers(sc.plan, sc.model.layers);
  std::vector<std::int64_t> first(chunks.size() + 1, 0);
  for (std::size_t k = 0; k < chunks.size(); ++k) first[k + 1] = first[k] + chunks[k];
  std::string out;
  for (std::size_t k = static_cast<std::size_t>(s); k < chunks.size(); k += static_cast<std::size_t>(sc.plan.pp)) {
    if (k != static_cast<std::size_t>(s)) out += runs ? " | " : "|";
    if (chunks[k] == 0) {
      out += '0';
      continue;
    }
    const auto part = std::span<const T>(choices).subspan(static_cast<std::size_t>(first[k]),
                                                          static_cast<std::size_t>(chunks[k]));
    std::string p;
    if constexpr (std::is_same_v<T, strategies::Keep>)
      p = strategies::keeps_pattern(part);
    else
      p = strategies::swaps_pattern(part);
    if (!runs) {
      out += p;
      continue;
    }
    for (std::size_t i = 0; i < p.size();) {
      std::size_t j = i;
      while (j < p.size() && p[j] == p[i]) ++j;
      out += (i > 0 ? " " : "") + std::to_string(j - i) + p[i];
      i = j;
    }
  }
  return out;
}

// The goal's lines: steps and why, time to train and GPU-hours.
std::string goal_text(const strategies::Scenario& sc, const strategies::GoalEstimate& g,
                      double step_s) {
  std::string out = "goal       ";
  out += sc.goal->target_loss ? "target loss " + fixed(*sc.goal->target_loss, 3)
                              : si(*sc.goal->tokens) + " tokens";
  out += " (convergence model " + sc.convergence->file + ")\n";
  if (!g.reachable) return out + "           not reached: " + g.unreachable_reason + "\n";
  out += "           " + count(static_cast<double>(g.steps)) + " steps, " + si(g.tokens) +
         " tokens: ";
  if (g.critical)
    out += "S(B) = S_min (1 + B_noise/B) = " + count(g.critical->s_min_steps) + " (1 + " +
           si(g.critical->b_noise_tokens) + "/" + si(g.batch_tokens) + ") = " + count(g.base_steps);
  else
    out += count(g.base_steps) + " steps of " + si(g.batch_tokens) + " tokens";
  if (g.lr) {
    char lr[32];
    std::snprintf(lr, sizeof lr, "%.3g", *g.lr);
    out += std::string(", learning rate ") + lr + " (" + fixed(g.lr_ratio, 2) + "x the best" +
           (g.lr_reach != 1 ? ", " + fixed(g.lr_ratio_effective, 2) + "x with " +
                                  std::string(enum_name(sc.plan.optimizer)) + "'s reach " + fixed(g.lr_reach, 1)
                            : std::string()) +
           ": x" + fixed(g.lr_factor, 3) + ")";
  }
  out += ", penalty x" + fixed(g.penalties.total(), 3);
  if (g.warmup_steps > 0) out += ", + " + count(static_cast<double>(g.warmup_steps)) + " warmup";
  const auto t = strategies::time_to_train(sc, g, step_s);
  out += "\n           time to train " + duration_text(t->seconds) + ", " + count(t->gpu_hours) +
         " GPU-hours\n";
  return out;
}

// Throughput figures of a step.
struct Rates {
  double step_s, tokens_per_s_per_gpu, model_tflops, hardware_tflops, mfu;
};
Rates rates(const strategies::Scenario& sc, const strategies::StepPrediction& p) {
  const double step = to_seconds(p.step_time);
  const double gpus = static_cast<double>(sc.cluster.gpus());
  const double tokens = static_cast<double>(sc.batch.global) * static_cast<double>(sc.model.tokens_per_sample());
  Rates r{step, 0, 0, 0, 0};
  if (step <= 0) return r;
  r.tokens_per_s_per_gpu = tokens / step / gpus;
  r.model_tflops = p.model_flops_per_step / step / gpus / 1e12;
  r.hardware_tflops = p.hardware_flops_per_step / step / gpus / 1e12;
  const double peak = sc.cluster.mean_peak_tflops(sc.plan.precision);
  r.mfu = peak > 0 ? r.model_tflops / peak : 0;
  return r;
}

// A JSON value's scalars as (dotted key, cell) pairs: numbers as JSON
// writes them, strings as they are, arrays of scalars joined by spaces.
void flatten(const ordered_json& v, const std::string& key,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(x, key.empty() ? k : key + "." + k, out);
  } else if (v.is_array()) {
    std::string cell;
    for (const auto& x : v) cell += (cell.empty() ? "" : " ") + (x.is_string() ? x.get<std::string>() : x.dump());
    out.emplace_back(key, cell);
  } else {
    out.emplace_back(key, v.is_string() ? v.get<std::string>() : v.dump());
  }
}

// The CSV: one row per pipeline stage, its own fields (stage.*) after every
// field of the whole simulation (the JSON output's, which the table shows
// and more), so each row is complete on its own and all rows are as wide.
std::string simulation_csv(const strategies::Scenario& sc, const ordered_json& j) {
  std::vector<std::pair<std::string, std::string>> common;
  ordered_json whole = j;
  whole.erase("memory_per_stage");
  whole.erase("notes");  // prose, not a field of the rows
  whole["plan"] = plan_summary(sc);
  whole["batch_global"] = sc.batch.global;
  whole["batch_micro"] = sc.batch.micro;
  whole["seq_len"] = sc.model.seq_len;
  whole["microbatches_per_pipeline"] = strategies::microbatches(sc.plan, sc.batch);
  flatten(whole, "", common);
  Table t;
  for (const auto& [k, _] : common) t.columns.push_back(k);
  bool first = true;
  for (const auto& st : j.at("memory_per_stage")) {
    std::vector<std::pair<std::string, std::string>> own;
    flatten(st, "stage", own);
    if (first)
      for (const auto& [k, _] : own) t.columns.push_back(k);
    first = false;
    std::vector<std::string> row;
    for (const auto& [_, v] : common) row.push_back(v);
    for (const auto& [_, v] : own) row.push_back(v);
    t.add_row(std::move(row));
  }
  return to_csv(t);
}

void add_distribution(ordered_json& j, const strategies::StepDistribution& d) {
  j["mean_s"] = d.mean_s;
  j["p50_s"] = d.p50_s;
  j["p90_s"] = d.p90_s;
  j["p99_s"] = d.p99_s;
  j["max_s"] = d.max_s;
}

ordered_json stragglers_json(const strategies::Scenario& sc, const strategies::StragglerStats& s) {
  ordered_json j;
  j["samples"] = s.samples;
  j["seed"] = sc.cluster.stragglers->seed;
  j["nominal_s"] = s.nominal_s;
  add_distribution(j, s.all);
  if (s.with_backup) {
    j["backup_replicas"] = s.backup_replicas;
    ordered_json b;
    add_distribution(b, *s.with_backup);
    // The gradients of the replicas not waited for are dropped.
    b["batch_global"] = sc.batch.global / sc.plan.dp * (sc.plan.dp - s.backup_replicas);
    j["with_backup"] = b;
  }
  if (s.asynchronous) {
    ordered_json a;
    add_distribution(a, *s.asynchronous);
    j["asynchronous"] = a;
  }
  return j;
}

std::string slowdown_text(const std::vector<double>& f) {
  std::string s = "slow       stage factors (cluster.slow; a stage runs at its slowest GPU's pace):";
  for (std::size_t i = 0; i < f.size(); ++i) s += (i ? ", " : " ") + fixed(f[i], 2);
  return s + "\n";
}

std::string stragglers_text(const strategies::StragglerStats& s) {
  auto line = [](const strategies::StepDistribution& d) {
    return "mean " + fixed(d.mean_s, 3) + " s, p50 " + fixed(d.p50_s, 3) + ", p90 " + fixed(d.p90_s, 3) +
           ", p99 " + fixed(d.p99_s, 3) + ", max " + fixed(d.max_s, 3);
  };
  std::string out = "stragglers " + std::to_string(s.samples) + " sampled steps: " + line(s.all) +
                    " (without the sampled slowdowns " + fixed(s.nominal_s, 3) + " s)\n";
  if (s.with_backup)
    out += "backup     not waiting for the " + std::to_string(s.backup_replicas) +
           " slowest replicas: " + line(*s.with_backup) + "\n";
  if (s.asynchronous)
    out += "async      no replica waiting for another, the time per global batch: " + line(*s.asynchronous) +
           " (gradients up to dp - 1 updates stale, not priced)\n";
  return out;
}

}  // namespace

std::string render_simulation(const strategies::Scenario& sc,
                              const strategies::MemoryEstimate& mem,
                              const strategies::StepPrediction* step, Format f,
                              const strategies::StragglerStats* stragglers) {
  const std::vector<double> slowdown = strategies::fixed_stage_slowdown(sc);
  const bool hetero = sc.cluster.heterogeneous();
  const auto on = strategies::stage_groups(sc.plan, sc.cluster);
  if (f == Format::Json || f == Format::Csv) {
    ordered_json j;
    j["scenario"] = sim::utf8_escaped(sc.file);
    j["model"] = sc.model.name;
    j["gpus"] = sc.cluster.gpus();
    if (sc.stack) j["stack"] = sc.stack->name;
    j["feasible"] = mem.feasible();
    if (mem.infeasible)
      j["infeasible_reason"] = {{"pool", mem.infeasible->pool},
                                {"needs_bytes", mem.infeasible->needs},
                                {"has_bytes", mem.infeasible->has}};
    if (step) {
      const Rates r = rates(sc, *step);
      j["step_time_s"] = r.step_s;
      j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
      j["model_tflops_per_gpu"] = r.model_tflops;
      j["hardware_tflops_per_gpu"] = r.hardware_tflops;
      j["mfu"] = r.mfu;
      j["time_breakdown_s"] = breakdown_json(step->breakdown);
      j["bubble_fraction"] = step->bubble_fraction;
      // A pipeline without flushes fills once per run, not per step.
      if (step->pipeline_fill > 0) j["pipeline_fill_s"] = to_seconds(step->pipeline_fill);
      j["critical_stage"] = step->critical_stage;
      j["tasks"] = step->tasks;
      if (!slowdown.empty()) j["stage_slowdown"] = slowdown;
      if (stragglers) j["stragglers"] = stragglers_json(sc, *stragglers);
      if (const auto g = strategies::estimate_goal(sc)) add_goal_fields(j, sc, *g, r.step_s);
    }
    j["peak_memory_bytes"] = mem.peak_bytes;
    j["memory_required_bytes"] = mem.required_bytes;
    j["gpu_memory_bytes"] = mem.gpu_capacity;
    j["peak_stage"] = mem.peak_stage;
    j["memory_breakdown_bytes"] = tags_json(mem.breakdown);
    // Which figure is which (PyTorch's names): the tensors, what the
    // caching allocator holds, what the device shows.
    const strategies::MemoryFigures fig = strategies::memory_figures(mem);
    j["memory_allocated_bytes"] = fig.allocated;
    j["memory_reserved_bytes"] = fig.reserved;
    if (const auto& a = mem.stages[static_cast<std::size_t>(mem.peak_stage)].allocator)
      j["allocator_replay"] = {{"mode", enum_name(sc.plan.implementation.allocator)},
                               {"reserved_bytes", a->reserved_peak},
                               {"allocated_bytes", a->allocated_peak},
                               {"fragmentation_bytes", a->reserved_peak - a->allocated_peak},
                               {"segments", a->segments_made},
                               {"steps", a->steps},
                               {"releases", a->releases},
                               {"overflow_bytes", a->overflow}};
    ordered_json stages = ordered_json::array();
    for (const auto& st : mem.stages) {
      stages.push_back({{"stage", st.stage},
                        {"peak_bytes", st.total},
                        {"params", st.params},
                        {"in_flight_microbatches", st.in_flight},
                        {"host_bytes", st.host_bytes},
                        {"nvme_bytes", st.nvme_bytes},
                        {"layer_keeps", stage_layers(sc, mem.layers.keeps, st.stage, false)},
                        {"layer_swaps", stage_layers(sc, mem.layers.swaps, st.stage, false)},
                        {"breakdown_bytes", tags_json(st.bytes)}});
      // On a cluster of groups: the GPUs the stage runs on and their memory.
      if (hetero) {
        stages.back()["gpus"] = strategies::stage_gpus(sc.cluster, on[static_cast<std::size_t>(st.stage)]);
        stages.back()["gpu_memory_bytes"] = st.capacity;
      }
    }
    j["memory_per_stage"] = stages;
    if (mem.budget) j["memory_budget_bytes"] = *mem.budget;
    j["host_memory_bytes"] = mem.host_bytes_per_node;
    j["host_memory_capacity_bytes"] = mem.host_capacity_per_node;
    j["nvme_bytes"] = mem.nvme_bytes_per_node;
    j["nvme_capacity_bytes"] = mem.nvme_capacity_per_node;
    j["memory_source"] = mem.source;
    if (const auto notes = strategies::plan_notes(sc); !notes.empty()) j["notes"] = notes;
    if (f == Format::Json) return j.dump(2) + "\n";
    return simulation_csv(sc, j);
  }

  Table per_stage;
  const bool swaps = sc.plan.offload.activations;
  per_stage.columns = {"stage", "parameters", "in_flight", "layers keep"};
  if (hetero) per_stage.columns.insert(per_stage.columns.begin() + 1, "gpus");
  if (swaps) per_stage.columns.emplace_back("to host");
  per_stage.columns.emplace_back("peak");
  for (MemTag t : kPrintedTags)
    if (t != MemTag::Other) per_stage.columns.emplace_back(enum_name(t));
  per_stage.align.assign(per_stage.columns.size(), Align::Right);
  for (const auto& st : mem.stages) {
    std::vector<std::string> row = {std::to_string(st.stage), count(static_cast<double>(st.params)),
                                    std::to_string(st.in_flight),
                                    stage_layers(sc, mem.layers.keeps, st.stage, f != Format::Csv)};
    if (hetero)
      row.insert(row.begin() + 1, printable(strategies::stage_gpus(sc.cluster, on[static_cast<std::size_t>(st.stage)])));
    if (swaps) row.push_back(stage_layers(sc, mem.layers.swaps, st.stage, f != Format::Csv));
    row.push_back(f == Format::Csv ? std::to_string(st.total) : gib(st.total));
    for (MemTag t : kPrintedTags) {
      if (t == MemTag::Other) continue;
      const Bytes b = st.bytes[static_cast<std::size_t>(t)];
      row.push_back(f == Format::Csv ? std::to_string(b) : gib(b));
    }
    per_stage.add_row(std::move(row));
  }

  std::string out;
  out += "scenario   " + printable(sc.file) + "\n";
  out += "model      " + printable(sc.model.name) + " on " + printable(sc.cluster.gpus_text()) + "\n";
  out += "plan       " + plan_summary(sc) + "\n";
  if (sc.stack) out += "stack      " + printable(sc.stack->name) + " (" + printable(sc.stack->description) + ")\n";
  out += "batch      " + std::to_string(sc.batch.global) +
         (sc.model.chain ? std::string(" samples") : " sequences of " + std::to_string(sc.model.seq_len) + " tokens") +
         ", microbatch " +
         std::to_string(sc.batch.micro) + " (" +
         std::to_string(strategies::microbatches(sc.plan, sc.batch)) + " per pipeline)\n\n";
  const std::string where = " per GPU (stage " + std::to_string(mem.peak_stage) + ", " + mem.source + ")";
  if (mem.feasible() && mem.peak_bytes <= mem.gpu_capacity) {
    out += "fits       peak " + gib(mem.peak_bytes) + " of " + gib(mem.gpu_capacity) + where + "\n";
  } else if (mem.feasible()) {
    // The tensors and the context fit; the allocator's cache on top does not.
    out += "fits       needs " + gib(mem.required_bytes) + " of " + gib(mem.gpu_capacity) + where +
           ": the tensors and the CUDA context; with the caching allocator's reserve the peak would be " +
           gib(mem.peak_bytes) + ", more than the GPU: PyTorch frees its unused cached blocks and retries "
           "the allocation instead (num_alloc_retries), which costs time Strata does not price\n";
  } else {
    const auto& r = *mem.infeasible;
    out += "DOES NOT FIT  " + r.pool + " memory: needs " + gib(r.needs) + ", has " + gib(r.has) +
           "\n";
  }
  if (step) {
    const Rates r = rates(sc, *step);
    const auto& b = step->breakdown;
    out += "step       " + fixed(r.step_s, 3) + " s, " + fixed(r.tokens_per_s_per_gpu, 0) +
           " " + sc.model.throughput_unit() + "/s per GPU, " + fixed(r.model_tflops, 1) + " model TFLOP/s per GPU (MFU " +
           fixed(100 * r.mfu, 1) + " %), " + fixed(r.hardware_tflops, 1) + " hardware TFLOP/s\n";
    Table t;
    t.columns = {"time (stage " + std::to_string(step->critical_stage) + ")", "seconds", "share"};
    t.align = {Align::Left, Align::Right, Align::Right};
    auto row = [&](const std::string& name, Time v) {
      if (v == 0 && name.rfind("exposed", 0) == 0) return;
      t.add_row({name, fixed(to_seconds(v), 4),
                 step->step_time > 0 ? fixed(100.0 * static_cast<double>(v) / static_cast<double>(step->step_time), 1) + " %" : "-"});
    };
    row("compute", b.compute);
    row("recompute", b.recompute);
    for (std::size_t k = 1; k < strategies::kCommKinds; ++k)
      row("exposed " + std::string(enum_name(static_cast<strategies::CommKind>(k))), b.exposed_comm[k]);
    row("pipeline bubble", b.bubble);
    row("offload stall", b.offload_stall);
    row("optimizer", b.optimizer);
    if (b.interference > 0) row("interference", b.interference);
    out += "\n" + to_text(t) + "\n";
    if (step->pipeline_fill > 0)
      out += "fill       " + fixed(to_seconds(step->pipeline_fill), 4) + " s once per run, not per step: " +
             std::string(enum_name(sc.plan.schedule)) +
             " runs steps one after another without flushing the pipeline\n";
    if (!slowdown.empty()) out += slowdown_text(slowdown);
    if (stragglers) out += stragglers_text(*stragglers);
    if (const auto g = strategies::estimate_goal(sc)) out += goal_text(sc, *g, r.step_s);
  }
  if (mem.budget)
    out += "layers     planned within " + gib(*mem.budget) +
           " per GPU: per stage, layers that keep all (A), drop the attention core (S), keep "
           "their input (I) or nothing (N; rerun from the segment's input), and move to the "
           "host all they keep (H), their linear layers' inputs (L) or nothing (-)\n";
  if (mem.host_bytes_per_node > 0 || mem.nvme_bytes_per_node > 0)
    out += "host       " + gib(mem.host_bytes_per_node) + " of " +
           gib(mem.host_capacity_per_node) + " per node; NVMe " + gib(mem.nvme_bytes_per_node) +
           " of " + gib(mem.nvme_capacity_per_node) + "\n";
  for (const std::string& n : strategies::plan_notes(sc)) out += "note       " + printable(n) + "\n";
  out += "\nmemory at the peak (stage " + std::to_string(mem.peak_stage) + ")\n";
  Table b;
  b.columns = {"tag", "bytes", "share"};
  b.align = {Align::Left, Align::Right, Align::Right};
  for (MemTag t : kPrintedTags) {
    const Bytes v = mem.breakdown[static_cast<std::size_t>(t)];
    if (t == MemTag::Other && v == 0) continue;
    b.add_row({std::string(enum_name(t)), gib(v),
               mem.peak_bytes > 0 ? fixed(100.0 * static_cast<double>(v) / static_cast<double>(mem.peak_bytes), 1) + " %" : "-"});
  }
  b.add_row({"total", gib(mem.peak_bytes), "100.0 %"});
  out += to_text(b);
  const strategies::MemoryFigures fig = strategies::memory_figures(mem);
  out += "allocated  " + gib(fig.allocated) + "  the tensors (torch.cuda.max_memory_allocated)\n";
  out += "reserved   " + gib(fig.reserved) + "  with the allocator's reserve (max_memory_reserved)\n";
  out += "device     " + gib(mem.peak_bytes) + "  with the CUDA context (what nvidia-smi shows)\n";
  if (const auto& a = mem.stages[static_cast<std::size_t>(mem.peak_stage)].allocator)
    out += "replayed   " + std::string(enum_name(sc.plan.implementation.allocator)) + " caching allocator: " +
           gib(a->reserved_peak) + " reserved for the step's declared tensors (" +
           gib(a->reserved_peak - a->allocated_peak) + " beyond them, " + std::to_string(a->segments_made) +
           " segments); not the peak's reserve: ops' temporaries are not declared\n";
  out += "\nper pipeline stage\n" + to_text(per_stage);
  return out;
}

}  // namespace strata::report
