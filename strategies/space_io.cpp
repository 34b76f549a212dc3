// Reading a scenario's `space` and the canonical JSON of a plan (its id).
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "sim/json_reader.hpp"
#include "sim/limits.hpp"
#include "strategies/scenario.hpp"
#include "strategies/space.hpp"
#include "strategies/stage_split.hpp"

namespace strata::strategies {

namespace {
struct PairHash {
  std::size_t operator()(const std::pair<std::int64_t, std::int64_t>& p) const {
    return std::hash<std::int64_t>{}(p.first) * 1000003u ^ std::hash<std::int64_t>{}(p.second);
  }
};
}  // namespace

namespace {

std::pair<std::int64_t, std::int64_t> int_range(Axis a) {
  switch (a) {
    case Axis::Zero: return {0, 3};
    case Axis::VirtualStages: return {1, 4096};
    case Axis::Global: case Axis::Micro: return {1, kMaxTokensPerStep};
    case Axis::RecomputeK: return {1, 100'000};
    case Axis::OffloadPrefetchDepth: return {0, 1024};
    default: return {1, kMaxGpus};
  }
}

template <class E>
std::int64_t enum_value(const JsonReader& e) {
  return static_cast<std::int64_t>(e.as_enum<E>());
}

std::int64_t read_enum(Axis a, const JsonReader& e) {
  switch (a) {
    case Axis::PipelineLayout: return enum_value<PipelineLayout>(e);
    case Axis::Recompute: return enum_value<Recompute>(e);
    case Axis::Offload: return enum_value<OffloadChoice>(e);
    case Axis::OffloadOptimizer: return enum_value<OffloadTarget>(e);
    case Axis::OffloadPlanner: return enum_value<OffloadPlanner>(e);
    case Axis::Compression: return enum_value<CompressionMethod>(e);
    case Axis::Optimizer: return enum_value<Optimizer>(e);
    case Axis::Precision: return enum_value<Precision>(e);
    case Axis::Fp8Recipe: return enum_value<cost::Fp8Recipe>(e);
    case Axis::DpTopology: return enum_value<DpTopology>(e);
    case Axis::Attention: return enum_value<AttentionKernel>(e);
    case Axis::TpCommOverlap: return enum_value<TpCommOverlap>(e);
    case Axis::GradReduceDtype: return enum_value<GradReduceDtype>(e);
    case Axis::CpComm: return enum_value<CpComm>(e);
    default: break;
  }
  e.fail("internal: not an enum axis");
}

// A schedule value: a schedule name, or "interleaved:N" for N virtual stages.
// With the schedule coupled to virtual stages (virtual_stages not an axis),
// "interleaved" keeps the plan's virtual stages (2 when the plan is not
// interleaved) and other schedules set 1.
AxisValue read_schedule(const JsonReader& e, bool coupled, const Plan& base) {
  const std::string s = e.as_string();
  const auto colon = s.find(':');
  const std::string name = s.substr(0, colon);
  const auto sched = enum_from_name<Schedule>(name);
  if (!sched)
    e.fail("must be one of " + enum_choices<Schedule>() + ", or interleaved:N (got \"" + s + "\")");
  AxisValue v{static_cast<std::int64_t>(*sched), 0};
  if (colon != std::string::npos) {
    const std::string digits = s.substr(colon + 1);
    if (*sched != Schedule::Interleaved)
      e.fail("\":N\" (virtual stages) applies only to interleaved (got \"" + s + "\")");
    if (!coupled)
      e.fail("\"interleaved:N\" cannot be combined with a virtual_stages axis; list "
             "\"interleaved\" and the virtual stages separately");
    if (digits.empty() || digits.size() > 4 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      e.fail("interleaved:N needs an integer N (got \"" + s + "\")");
    v.virtual_stages = std::stoll(digits);
    if (v.virtual_stages < 2) e.fail("interleaved:N needs N >= 2 (got \"" + s + "\")");
  } else if (coupled) {
    v.virtual_stages = *sched == Schedule::Interleaved
                           ? (base.schedule == Schedule::Interleaved ? base.virtual_stages : 2)
                           : 1;
  }
  return v;
}

AxisValue read_value(Axis a, const JsonReader& e, bool coupled, const Plan& base) {
  switch (axis_kind(a)) {
    case AxisKind::Int: {
      const auto [lo, hi] = int_range(a);
      return {e.as_int(lo, hi), 0};
    }
    case AxisKind::Bool: return {e.as_bool() ? 1 : 0, 0};
    case AxisKind::Enum: break;
  }
  if (a == Axis::Schedule) return read_schedule(e, coupled, base);
  return {read_enum(a, e), 0};
}

template <class E>
std::string nm(E e) {
  return std::string(enum_name(e));
}

}  // namespace

Space read_space(const JsonReader& r, const Scenario& base) {
  Space sp;
  sp.gpus = base.cluster.gpus();
  const std::string rule = "must be \"auto\" or an object of axes";
  bool system_auto = false;
  std::array<std::optional<JsonReader>, kAxes> listed;
  if (r.is_string()) {
    if (r.as_string() != "auto") r.fail(rule + " (got \"" + r.as_string() + "\")");
    system_auto = true;
  } else if (r.is_object()) {
    if (auto s = r.get("system")) {
      if (!s->is_string() || s->as_string() != "auto")
        s->fail("must be \"auto\" (opens every system axis the space does not list)");
      system_auto = true;
    }
    for (const auto& [a, name] : EnumNames<Axis>::table)
      listed[static_cast<std::size_t>(a)] = r.get(name);
    r.reject_unknown_keys();
  } else {
    r.fail(rule);
  }
  auto is_listed = [&](Axis a) { return listed[static_cast<std::size_t>(a)].has_value(); };

  const bool offload_parts = is_listed(Axis::OffloadActivations) ||
                             is_listed(Axis::OffloadWeights) || is_listed(Axis::OffloadOptimizer);
  if (is_listed(Axis::Offload) && offload_parts)
    listed[static_cast<std::size_t>(Axis::Offload)]->fail(
        "conflicts with offload.activations, offload.weights and offload.optimizer: list "
        "either the composite axis or its parts");
  const bool coupled = !is_listed(Axis::VirtualStages);

  bool dp_listed = false;
  for (const auto& [a, name] : EnumNames<Axis>::table) {
    const auto& entry = listed[static_cast<std::size_t>(a)];
    std::vector<AxisValue> values;
    if (entry) {
      if (entry->is_string()) {
        if (entry->as_string() != "auto")
          entry->fail("must be \"auto\" or a list of values (got \"" + entry->as_string() + "\")");
        if (a == Axis::DP) continue;  // "auto": derived from the other degrees
        values = auto_values(a, base, coupled);
        if (values.empty())
          entry->fail("has no \"auto\" values (it changes what is trained); list them");
      } else {
        if (!entry->is_array()) entry->fail("must be \"auto\" or a list of values");
        const auto elems = entry->elements();
        if (elems.empty()) entry->fail("must list at least one value");
        // Duplicates by a hash set: a list of any length is checked in linear time.
        std::unordered_set<std::pair<std::int64_t, std::int64_t>, PairHash> seen;
        seen.reserve(elems.size());
        for (const auto& e : elems) {
          const AxisValue v = read_value(a, e, coupled, base.plan);
          if (!seen.insert({v.value, v.virtual_stages}).second) e.fail("duplicate value " + value_name(a, v));
          values.push_back(v);
        }
        if (a == Axis::DP) dp_listed = true;
      }
    } else if (system_auto && (is_system_axis(a) || (a == Axis::PipelineLayout && base.cluster.heterogeneous())) &&
               !(a == Axis::Offload && offload_parts)) {
      values = auto_values(a, base, coupled);
    } else {
      continue;
    }
    sp.axes.push_back({a, std::move(values)});
  }

  const bool degree = sp.find(Axis::TP) || sp.find(Axis::PP) || sp.find(Axis::CP);
  sp.derive_dp = !dp_listed && degree;
  sp.balance_stages = !base.plan.stage_layers.empty() &&
                      (sp.find(Axis::PP) || sp.find(Axis::VirtualStages) || sp.find(Axis::Schedule) ||
                       sp.find(Axis::PipelineLayout));

  // The count must fit an index.
  std::uint64_t n = 1;
  for (const auto& ax : sp.axes) {
    const std::uint64_t k = ax.values.size();
    if (n > (std::uint64_t{1} << 62) / k) r.fail("has more than 2^62 plans; list fewer values");
    n *= k;
  }
  return sp;
}

std::string canonical_json(const Plan& p, const Batch& b) {
  using nlohmann::json;  // std::map objects: keys come out sorted
  json offload = {{"activations", p.offload.activations},
                  {"weights", p.offload.weights},
                  {"optimizer", nm(p.offload.optimizer)},
                  {"prefetch_depth", p.offload.prefetch_depth},
                  {"planner", nm(p.offload.planner)}};
  json compression = {{"method", nm(p.compression.method)}};
  switch (p.compression.method) {
    case CompressionMethod::TopK:
    case CompressionMethod::RandomK:
      compression["ratio"] = p.compression.ratio;
      compression["error_feedback"] = p.compression.error_feedback;
      break;
    case CompressionMethod::Qsgd: compression["bits"] = p.compression.bits; break;
    case CompressionMethod::PowerSgd: compression["rank"] = p.compression.rank; break;
    default: break;
  }
  // Written only when set, so plans without it keep their ids.
  if (p.compression.method != CompressionMethod::None && p.compression.bucketed) compression["bucketed"] = true;
  const auto& im = p.implementation;
  std::string order;
  for (auto d : im.rank_order) {
    if (!order.empty()) order += '-';
    order += nm(d);
  }
  json implementation = {{"attention", nm(im.attention)},
                         {"fused_elementwise", im.fused_elementwise},
                         {"overlap_grad_reduce", im.overlap_grad_reduce},
                         {"overlap_param_gather", im.overlap_param_gather},
                         {"tp_comm_overlap", nm(im.tp_comm_overlap)},
                         {"pp_scatter_gather", im.pp_scatter_gather},
                         {"overlap_p2p", im.overlap_p2p},
                         {"fp32_grad_accumulation", im.fp32_grad_accumulation},
                         {"rank_order", order}};
  // Added later: written only when off, so the ids of existing plans stay.
  if (!im.tp_grad_overlap) implementation["tp_grad_overlap"] = false;
  if (!im.sp_regather_input) implementation["sp_regather_input"] = false;
  if (im.fp8_param_gather) implementation["fp8_param_gather"] = true;
  if (im.allocator != sim::AllocatorMode::Native) implementation["allocator"] = nm(im.allocator);
  if (!im.grad_accumulation_fusion) implementation["grad_accumulation_fusion"] = false;
  if (im.host_dispatch_us != 0) implementation["host_dispatch_us"] = im.host_dispatch_us;
  if (im.zero3_gather_per_module) implementation["zero3_gather_per_module"] = true;
  if (im.zero3_root_unsharded) implementation["zero3_root_unsharded"] = true;
  if (im.zero3_flat_grads) implementation["zero3_flat_grads"] = true;
  if (im.zero3_gather_copy_out) implementation["zero3_gather_copy_out"] = true;
  if (im.zero3_persistence_threshold != 0)
    implementation["zero3_persistence_threshold"] = im.zero3_persistence_threshold;
  if (im.zero3_reduce_bucket != 0) implementation["zero3_reduce_bucket"] = im.zero3_reduce_bucket;
  if (im.zero3_max_live != 0) implementation["zero3_max_live"] = im.zero3_max_live;
  if (im.zero3_host_per_rank) implementation["zero3_host_per_rank"] = true;
  if (im.zero3_prefetch_bucket != 0) implementation["zero3_prefetch_bucket"] = im.zero3_prefetch_bucket;
  if (im.zero3_reuse_distance != 0) implementation["zero3_reuse_distance"] = im.zero3_reuse_distance;
  if (im.cross_entropy != CrossEntropy::InPlace) implementation["cross_entropy"] = nm(im.cross_entropy);
  if (im.train_metric_passes != 0) implementation["train_metric_passes"] = im.train_metric_passes;
  if (im.grad_reduce_dtype != GradReduceDtype::Accumulation)
    implementation["grad_reduce_dtype"] = nm(im.grad_reduce_dtype);
  if (im.cp_comm != CpComm::P2p) implementation["cp_comm"] = nm(im.cp_comm);
  json plan = {{"dp", p.dp},
               {"tp", p.tp},
               {"pp", p.pp},
               {"cp", p.cp},
               {"ep", p.ep},
               {"zero", p.zero},
               {"schedule", nm(p.schedule)},
               {"virtual_stages", p.virtual_stages},
               {"sequence_parallel", p.sequence_parallel},
               {"recompute", nm(p.recompute)},
               {"offload", offload},
               {"compression", compression},
               {"optimizer", nm(p.optimizer)},
               {"precision", nm(p.precision)},
               {"dp_topology", nm(p.dp_topology)},
               {"implementation", implementation}};
  // A layout that weighs stages by their GPUs derives its stage_layers.
  if (!p.stage_layers.empty() && !weighs_stages(p.pipeline_layout)) plan["stage_layers"] = p.stage_layers;
  // Only where it is not the default, so plans without it keep their ids.
  if (p.pipeline_layout != PipelineLayout::Balanced) plan["pipeline_layout"] = nm(p.pipeline_layout);
  if (p.ps_staleness > 0) plan["ps_staleness"] = p.ps_staleness;
  if (p.optimizer_states != StateDtype::FP32) plan["optimizer_states"] = nm(p.optimizer_states);
  if (p.fp8_recipe != cost::Fp8Recipe::Delayed) plan["fp8_recipe"] = nm(p.fp8_recipe);
  if (p.bf16_first_layers > 0 || p.bf16_last_layers > 0)
    plan["bf16_layers"] = {{"first", p.bf16_first_layers}, {"last", p.bf16_last_layers}};
  if (p.recompute == Recompute::EveryK || p.recompute == Recompute::EveryNth) plan["recompute_k"] = p.recompute_k;
  if (p.partition_activations) plan["partition_activations"] = true;
  if (!(p.moe == MoeRouting{})) {
    json moe = json::object();
    if (p.moe.capacity_factor) moe["capacity_factor"] = *p.moe.capacity_factor;
    if (p.moe.pad_to_capacity) moe["pad_to_capacity"] = true;
    if (p.moe.load_imbalance != 1.0) moe["load_imbalance"] = p.moe.load_imbalance;
    plan["moe"] = moe;
  }
  if (const auto modules = recompute_modules_of(p); modules != cost::kDefaultRecomputeModules) {
    json mods = json::array();
    for (const std::string_view name : cost::module_names(modules)) mods.push_back(name);
    plan["recompute_modules"] = mods;
  }
  if (p.memory_budget_GiB &&
      (p.recompute == Recompute::Optimal || p.offload.planner == OffloadPlanner::Joint ||
       p.offload.planner == OffloadPlanner::Priority))
    plan["memory_budget_GiB"] = *p.memory_budget_GiB;
  // Only where it is not the default, so plans without it keep their ids.
  if (p.offload.weights && p.offload.weights_target == OffloadTarget::Nvme) plan["offload"]["weights"] = "nvme";
  const json j = {{"batch", {{"global", b.global}, {"micro", b.micro}}}, {"plan", plan}};
  return j.dump();
}

}  // namespace strata::strategies
