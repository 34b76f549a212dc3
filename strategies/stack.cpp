#include "strategies/stack.hpp"

#include <cmath>

#include "strategies/scenario.hpp"
#include "strategies/space.hpp"
#include "strategies/stage_split.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {

namespace {

void set(Implementation& im, ImplKey k, std::int64_t v) {
  const bool on = v != 0;
  switch (k) {
    case ImplKey::Attention: im.attention = static_cast<AttentionKernel>(v); break;
    case ImplKey::FusedElementwise: im.fused_elementwise = on; break;
    case ImplKey::OverlapGradReduce: im.overlap_grad_reduce = on; break;
    case ImplKey::OverlapParamGather: im.overlap_param_gather = on; break;
    case ImplKey::TpCommOverlap: im.tp_comm_overlap = static_cast<TpCommOverlap>(v); break;
    case ImplKey::CpComm: im.cp_comm = static_cast<CpComm>(v); break;
    case ImplKey::PpScatterGather: im.pp_scatter_gather = on; break;
    case ImplKey::OverlapP2p: im.overlap_p2p = on; break;
    case ImplKey::Fp32GradAccumulation: im.fp32_grad_accumulation = on; break;
    case ImplKey::TpGradOverlap: im.tp_grad_overlap = on; break;
    case ImplKey::SpRegatherInput: im.sp_regather_input = on; break;
    case ImplKey::GradAccumulationFusion: im.grad_accumulation_fusion = on; break;
    case ImplKey::HostDispatch: im.host_dispatch_us = static_cast<double>(v) / 1000.0; break;
    case ImplKey::Zero3GatherPerModule: im.zero3_gather_per_module = on; break;
    case ImplKey::Zero3PersistenceThreshold: im.zero3_persistence_threshold = v; break;
    case ImplKey::Zero3ReduceBucket: im.zero3_reduce_bucket = v; break;
    case ImplKey::Zero3MaxLive: im.zero3_max_live = v; break;
    case ImplKey::Zero3PrefetchBucket: im.zero3_prefetch_bucket = v; break;
    case ImplKey::Zero3ReuseDistance: im.zero3_reuse_distance = v; break;
    case ImplKey::Zero3HostPerRank: im.zero3_host_per_rank = on; break;
    case ImplKey::Zero3RootUnsharded: im.zero3_root_unsharded = on; break;
    case ImplKey::Zero3FlatGrads: im.zero3_flat_grads = on; break;
    case ImplKey::Zero3GatherCopyOut: im.zero3_gather_copy_out = on; break;
    case ImplKey::CrossEntropy: im.cross_entropy = static_cast<CrossEntropy>(v); break;
    case ImplKey::TrainMetricPasses: im.train_metric_passes = v; break;
    case ImplKey::Fp8ParamGather: im.fp8_param_gather = on; break;
    case ImplKey::Allocator: im.allocator = static_cast<sim::AllocatorMode>(v); break;
    case ImplKey::GradReduceDtype: im.grad_reduce_dtype = static_cast<GradReduceDtype>(v); break;
  }
}

std::int64_t plan_value(const Plan& p, StackSetting::By by) {
  switch (by) {
    case StackSetting::By::Precision: return static_cast<std::int64_t>(p.precision);
    case StackSetting::By::Schedule: return static_cast<std::int64_t>(p.schedule);
    case StackSetting::By::Zero: return p.zero;
    case StackSetting::By::TensorParallel: return p.tp > 1 ? 1 : 0;
    case StackSetting::By::Always: break;
  }
  return 0;
}

std::string value_text(ImplKey k, std::int64_t v) {
  switch (k) {
    case ImplKey::Attention: return std::string(enum_name(static_cast<AttentionKernel>(v)));
    case ImplKey::TpCommOverlap: return std::string(enum_name(static_cast<TpCommOverlap>(v)));
    case ImplKey::CpComm: return std::string(enum_name(static_cast<CpComm>(v)));
    case ImplKey::CrossEntropy: return std::string(enum_name(static_cast<CrossEntropy>(v)));
    case ImplKey::Allocator: return std::string(enum_name(static_cast<sim::AllocatorMode>(v)));
    case ImplKey::GradReduceDtype: return std::string(enum_name(static_cast<GradReduceDtype>(v)));
    case ImplKey::HostDispatch: {
      std::string t = std::to_string(static_cast<double>(v) / 1000.0);
      t.erase(t.find_last_not_of('0') + 1);
      if (t.back() == '.') t.pop_back();
      return t + " us";
    }
    case ImplKey::Zero3PersistenceThreshold:
    case ImplKey::Zero3ReduceBucket:
    case ImplKey::Zero3MaxLive:
    case ImplKey::Zero3PrefetchBucket:
    case ImplKey::Zero3ReuseDistance: return std::to_string(v) + " elements";
    case ImplKey::TrainMetricPasses: return std::to_string(v);
    default: return v != 0 ? "true" : "false";
  }
}

std::string case_text(StackSetting::By by, std::int64_t when) {
  switch (by) {
    case StackSetting::By::Precision: return std::string(enum_name(static_cast<Precision>(when)));
    case StackSetting::By::Schedule: return std::string(enum_name(static_cast<Schedule>(when)));
    case StackSetting::By::Zero: return "zero " + std::to_string(when);
    case StackSetting::By::TensorParallel: return when != 0 ? "tp above 1" : "tp 1";
    case StackSetting::By::Always: break;
  }
  return "";
}

}  // namespace

std::string setting_text(const StackSetting& st) {
  if (st.by == StackSetting::By::Always) return value_text(st.key, st.otherwise);
  std::string out;
  for (const auto& [when, v] : st.cases) out += case_text(st.by, when) + ": " + value_text(st.key, v) + "; ";
  return out + "otherwise " + value_text(st.key, st.otherwise);
}

std::int64_t implementation_value(const Implementation& im, ImplKey k) {
  switch (k) {
    case ImplKey::Attention: return static_cast<std::int64_t>(im.attention);
    case ImplKey::FusedElementwise: return im.fused_elementwise;
    case ImplKey::OverlapGradReduce: return im.overlap_grad_reduce;
    case ImplKey::OverlapParamGather: return im.overlap_param_gather;
    case ImplKey::TpCommOverlap: return static_cast<std::int64_t>(im.tp_comm_overlap);
    case ImplKey::CpComm: return static_cast<std::int64_t>(im.cp_comm);
    case ImplKey::PpScatterGather: return im.pp_scatter_gather;
    case ImplKey::OverlapP2p: return im.overlap_p2p;
    case ImplKey::Fp32GradAccumulation: return im.fp32_grad_accumulation;
    case ImplKey::TpGradOverlap: return im.tp_grad_overlap;
    case ImplKey::SpRegatherInput: return im.sp_regather_input;
    case ImplKey::GradAccumulationFusion: return im.grad_accumulation_fusion;
    case ImplKey::HostDispatch: return std::llround(im.host_dispatch_us * 1000.0);
    case ImplKey::Zero3GatherPerModule: return im.zero3_gather_per_module;
    case ImplKey::Zero3PersistenceThreshold: return im.zero3_persistence_threshold;
    case ImplKey::Zero3ReduceBucket: return im.zero3_reduce_bucket;
    case ImplKey::Zero3MaxLive: return im.zero3_max_live;
    case ImplKey::Zero3PrefetchBucket: return im.zero3_prefetch_bucket;
    case ImplKey::Zero3ReuseDistance: return im.zero3_reuse_distance;
    case ImplKey::Zero3HostPerRank: return im.zero3_host_per_rank;
    case ImplKey::Zero3RootUnsharded: return im.zero3_root_unsharded;
    case ImplKey::Zero3FlatGrads: return im.zero3_flat_grads;
    case ImplKey::Zero3GatherCopyOut: return im.zero3_gather_copy_out;
    case ImplKey::CrossEntropy: return static_cast<std::int64_t>(im.cross_entropy);
    case ImplKey::TrainMetricPasses: return im.train_metric_passes;
    case ImplKey::Fp8ParamGather: return im.fp8_param_gather;
    case ImplKey::Allocator: return static_cast<std::int64_t>(im.allocator);
    case ImplKey::GradReduceDtype: return static_cast<std::int64_t>(im.grad_reduce_dtype);
  }
  return 0;
}

std::string implementation_text(ImplKey k, std::int64_t v) { return value_text(k, v); }

bool implementation_acts(ImplKey k, const Plan& plan) {
  switch (k) {
    case ImplKey::CpComm: return plan.cp > 1;
    case ImplKey::TpGradOverlap: return plan.tp > 1;
    case ImplKey::SpRegatherInput: return plan.tp > 1 && plan.sequence_parallel;
    case ImplKey::Zero3ReduceBucket:
    case ImplKey::Zero3MaxLive:
    case ImplKey::Zero3HostPerRank: return plan.zero >= 3 && zero_shards(plan) > 1;
    // Only through DeepSpeed's coordinator.
    case ImplKey::Zero3PrefetchBucket:
    case ImplKey::Zero3ReuseDistance:
      return plan.zero >= 3 && zero_shards(plan) > 1 && plan.implementation.zero3_max_live > 0;
    default: return true;
  }
}

void apply_stack(const Stack& stack, Plan& plan, ImplKeys fixed) {
  for (const StackSetting& st : stack.settings) {
    if (fixed.has(st.key)) continue;
    std::int64_t v = st.otherwise;
    const std::int64_t mine = plan_value(plan, st.by);
    for (const auto& [when, value] : st.cases)
      if (when == mine) v = value;
    set(plan.implementation, st.key, v);
  }
}

ImplKeys implementation_axes(const Space& space) {
  constexpr std::pair<Axis, ImplKey> kAxisKey[] = {
      {Axis::Attention, ImplKey::Attention},
      {Axis::FusedElementwise, ImplKey::FusedElementwise},
      {Axis::OverlapGradReduce, ImplKey::OverlapGradReduce},
      {Axis::OverlapParamGather, ImplKey::OverlapParamGather},
      {Axis::TpCommOverlap, ImplKey::TpCommOverlap},
      {Axis::PpScatterGather, ImplKey::PpScatterGather},
      {Axis::OverlapP2p, ImplKey::OverlapP2p},
      {Axis::Fp32GradAccumulation, ImplKey::Fp32GradAccumulation},
      {Axis::GradReduceDtype, ImplKey::GradReduceDtype},
      {Axis::CpComm, ImplKey::CpComm},
  };
  ImplKeys out;
  for (const auto& [axis, key] : kAxisKey)
    if (space.find(axis)) out.add(key);
  return out;
}

void space_point(const Scenario& base, const Space& space, std::uint64_t index, Plan& plan, Batch& batch) {
  plan = base.plan;
  batch = base.batch;
  // Under a weighed layout the template's split was computed for its own pp
  // and layout (a file cannot give both); a point computes its own below.
  if (weighs_stages(base.plan.pipeline_layout)) plan.stage_layers.clear();
  space.apply(index, plan, batch);
  if (base.stack) apply_stack(*base.stack, plan, base.implementation_keys | implementation_axes(space));
  resolve_stage_layers(plan, batch, base.model, base.cluster, base.group_curves.get());
}

// --- capabilities (capability.hpp) ---


namespace {

std::string field_value_text(PlanField f, std::int64_t v) {
  switch (f) {
    case PlanField::Schedule: return std::string(enum_name(static_cast<Schedule>(v)));
    case PlanField::PipelineLayout: return std::string(enum_name(static_cast<PipelineLayout>(v)));
    case PlanField::Recompute: return std::string(enum_name(static_cast<Recompute>(v)));
    case PlanField::OffloadOptimizer: return std::string(enum_name(static_cast<OffloadTarget>(v)));
    case PlanField::OffloadPlanner: return std::string(enum_name(static_cast<OffloadPlanner>(v)));
    case PlanField::Compression: return std::string(enum_name(static_cast<CompressionMethod>(v)));
    case PlanField::Optimizer: return std::string(enum_name(static_cast<Optimizer>(v)));
    case PlanField::OptimizerStates: return std::string(enum_name(static_cast<StateDtype>(v)));
    case PlanField::Precision: return std::string(enum_name(static_cast<Precision>(v)));
    case PlanField::DpTopology: return std::string(enum_name(static_cast<DpTopology>(v)));
    default: break;
  }
  if (field_kind(f) == FieldKind::Bool) return v != 0 ? "true" : "false";
  return std::to_string(v);
}

}  // namespace

FieldKind field_kind(PlanField f) {
  switch (f) {
    case PlanField::Dp:
    case PlanField::Tp:
    case PlanField::Pp:
    case PlanField::Cp:
    case PlanField::Ep:
    case PlanField::Zero:
    case PlanField::VirtualStages: return FieldKind::Integer;
    case PlanField::SequenceParallel:
    case PlanField::RecomputeModules:
    case PlanField::OffloadActivations:
    case PlanField::OffloadWeights: return FieldKind::Bool;
    default: return FieldKind::Enum;
  }
}

std::int64_t plan_field(const Plan& p, PlanField f) {
  auto num = [](auto e) { return static_cast<std::int64_t>(e); };
  switch (f) {
    case PlanField::Dp: return p.dp;
    case PlanField::Tp: return p.tp;
    case PlanField::Pp: return p.pp;
    case PlanField::Cp: return p.cp;
    case PlanField::Ep: return p.ep;
    case PlanField::Zero: return p.zero;
    case PlanField::VirtualStages: return p.virtual_stages;
    case PlanField::Schedule: return num(p.schedule);
    case PlanField::PipelineLayout: return num(p.pipeline_layout);
    case PlanField::SequenceParallel: return p.sequence_parallel ? 1 : 0;
    case PlanField::Recompute: return num(p.recompute);
    case PlanField::RecomputeModules:
      return recompute_modules_of(p) != cost::kDefaultRecomputeModules ? 1 : 0;
    case PlanField::OffloadActivations: return p.offload.activations ? 1 : 0;
    case PlanField::OffloadWeights: return p.offload.weights ? 1 : 0;
    case PlanField::OffloadOptimizer: return num(p.offload.optimizer);
    case PlanField::OffloadPlanner: return num(p.offload.planner);
    case PlanField::Compression: return num(p.compression.method);
    case PlanField::Optimizer: return num(p.optimizer);
    case PlanField::OptimizerStates: return num(p.optimizer_states);
    case PlanField::Precision: return num(p.precision);
    case PlanField::DpTopology: return num(p.dp_topology);
  }
  return 0;
}

bool refuses(const CapabilityRule& rule, const Plan& p) {
  for (const FieldMatch& m : rule.when) {
    const std::int64_t v = plan_field(p, m.field);
    if (m.at_least && v < *m.at_least) return false;
    if (!m.values.empty()) {
      bool any = false;
      for (std::int64_t x : m.values) any = any || x == v;
      if (!any) return false;
    }
  }
  return !rule.when.empty();
}

std::string when_text(const CapabilityRule& rule) {
  std::string out;
  for (const FieldMatch& m : rule.when) {
    if (!out.empty()) out += ", ";
    out += std::string(enum_name(m.field));
    if (m.at_least) {
      out += " >= " + std::to_string(*m.at_least);
      continue;
    }
    out += " ";
    for (std::size_t i = 0; i < m.values.size(); ++i)
      out += (i ? "|" : "") + field_value_text(m.field, m.values[i]);
  }
  return out;
}

std::optional<Violation> launch_violation(const Stack& stack, const Plan& p) {
  for (const CapabilityRule& rule : stack.capabilities) {
    if (!refuses(rule, p)) continue;
    return Violation{stack.name + "/" + rule.name, "plan." + std::string(enum_name(rule.when.front().field)),
                     stack.name + " cannot launch this plan (" + rule.name + ": " +
                         when_text(rule) + "): " + rule.message};
  }
  return std::nullopt;
}

}  // namespace strata::strategies
