#include "strategies/stack.hpp"

#include "strategies/scenario.hpp"
#include "strategies/space.hpp"

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
    case ImplKey::PpScatterGather: im.pp_scatter_gather = on; break;
    case ImplKey::OverlapP2p: im.overlap_p2p = on; break;
    case ImplKey::Fp32GradAccumulation: im.fp32_grad_accumulation = on; break;
    case ImplKey::TpGradOverlap: im.tp_grad_overlap = on; break;
    case ImplKey::GradAccumulationFusion: im.grad_accumulation_fusion = on; break;
  }
}

std::int64_t plan_value(const Plan& p, StackSetting::By by) {
  switch (by) {
    case StackSetting::By::Precision: return static_cast<std::int64_t>(p.precision);
    case StackSetting::By::Schedule: return static_cast<std::int64_t>(p.schedule);
    case StackSetting::By::Zero: return p.zero;
    case StackSetting::By::Always: break;
  }
  return 0;
}

std::string value_text(ImplKey k, std::int64_t v) {
  switch (k) {
    case ImplKey::Attention: return std::string(enum_name(static_cast<AttentionKernel>(v)));
    case ImplKey::TpCommOverlap: return std::string(enum_name(static_cast<TpCommOverlap>(v)));
    default: return v != 0 ? "true" : "false";
  }
}

std::string case_text(StackSetting::By by, std::int64_t when) {
  switch (by) {
    case StackSetting::By::Precision: return std::string(enum_name(static_cast<Precision>(when)));
    case StackSetting::By::Schedule: return std::string(enum_name(static_cast<Schedule>(when)));
    case StackSetting::By::Zero: return "zero " + std::to_string(when);
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
  };
  ImplKeys out;
  for (const auto& [axis, key] : kAxisKey)
    if (space.find(axis)) out.add(key);
  return out;
}

void space_point(const Scenario& base, const Space& space, std::uint64_t index, Plan& plan, Batch& batch) {
  plan = base.plan;
  batch = base.batch;
  space.apply(index, plan, batch);
  if (base.stack) apply_stack(*base.stack, plan, base.implementation_keys | implementation_axes(space));
}

}  // namespace strata::strategies
