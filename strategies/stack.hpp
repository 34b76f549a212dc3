#pragma once
// Software stacks as data (docs/stacks.md): what the framework that runs a
// plan does unless told otherwise — Megatron-LM of a given year, DeepSpeed,
// llm-foundry, torchtitan — as bundled files (configs/stacks/*.json) of
// implementation settings, each with its source in the framework's code or
// documentation. A scenario names its stack ("stack": "deepspeed"); the
// stack's settings replace Strata's defaults, and the scenario's own
// plan.implementation keys (and an explored space's implementation axes)
// override them key by key.
//
// A setting may depend on the plan, as the frameworks' own defaults do
// (DeepSpeed overlaps gradient reduction by default under ZeRO-3 only;
// Megatron-LM accumulates gradients in fp32 under bf16 only), so it is
// resolved per plan: apply_stack.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "strategies/capability.hpp"
#include "strategies/plan.hpp"

namespace strata {
class JsonReader;
}

namespace strata::strategies {

// The settings of plan.implementation a stack can set, one per key of its
// JSON object (rank_order is the launcher's, not the framework's).
enum class ImplKey : std::uint8_t {
  Attention,
  FusedElementwise,
  OverlapGradReduce,
  OverlapParamGather,
  TpCommOverlap,
  PpScatterGather,
  OverlapP2p,
  Fp32GradAccumulation,
  TpGradOverlap,
  GradAccumulationFusion,
  HostDispatch,  // its value in nanoseconds (host_dispatch_us × 1000)
  Zero3GatherPerModule,
  Zero3PersistenceThreshold,
  Zero3RootUnsharded,
  CrossEntropy,
  Fp8ParamGather,
  Allocator,
  GradReduceDtype,
  Zero3FlatGrads,
  Zero3GatherCopyOut,
  CpComm,
  SpRegatherInput,
  Zero3ReduceBucket,
  Zero3MaxLive,
  Zero3PrefetchBucket,
  Zero3ReuseDistance,
  Zero3HostPerRank,
  TrainMetricPasses,
};

}  // namespace strata::strategies

namespace strata {
template <>
struct EnumNames<strategies::ImplKey> {
  static constexpr std::array<std::pair<strategies::ImplKey, std::string_view>, 28> table{{
      {strategies::ImplKey::Attention, "attention"},
      {strategies::ImplKey::FusedElementwise, "fused_elementwise"},
      {strategies::ImplKey::OverlapGradReduce, "overlap_grad_reduce"},
      {strategies::ImplKey::OverlapParamGather, "overlap_param_gather"},
      {strategies::ImplKey::TpCommOverlap, "tp_comm_overlap"},
      {strategies::ImplKey::PpScatterGather, "pp_scatter_gather"},
      {strategies::ImplKey::OverlapP2p, "overlap_p2p"},
      {strategies::ImplKey::Fp32GradAccumulation, "fp32_grad_accumulation"},
      {strategies::ImplKey::TpGradOverlap, "tp_grad_overlap"},
      {strategies::ImplKey::GradAccumulationFusion, "grad_accumulation_fusion"},
      {strategies::ImplKey::HostDispatch, "host_dispatch_us"},
      {strategies::ImplKey::Zero3GatherPerModule, "zero3_gather_per_module"},
      {strategies::ImplKey::Zero3PersistenceThreshold, "zero3_persistence_threshold"},
      {strategies::ImplKey::Zero3RootUnsharded, "zero3_root_unsharded"},
      {strategies::ImplKey::CrossEntropy, "cross_entropy"},
      {strategies::ImplKey::Fp8ParamGather, "fp8_param_gather"},
      {strategies::ImplKey::Allocator, "allocator"},
      {strategies::ImplKey::GradReduceDtype, "grad_reduce_dtype"},
      {strategies::ImplKey::Zero3FlatGrads, "zero3_flat_grads"},
      {strategies::ImplKey::Zero3GatherCopyOut, "zero3_gather_copy_out"},
      {strategies::ImplKey::CpComm, "cp_comm"},
      {strategies::ImplKey::SpRegatherInput, "sp_regather_input"},
      {strategies::ImplKey::Zero3ReduceBucket, "zero3_reduce_bucket"},
      {strategies::ImplKey::Zero3MaxLive, "zero3_max_live"},
      {strategies::ImplKey::Zero3PrefetchBucket, "zero3_prefetch_bucket"},
      {strategies::ImplKey::Zero3ReuseDistance, "zero3_reuse_distance"},
      {strategies::ImplKey::Zero3HostPerRank, "zero3_host_per_rank"},
      {strategies::ImplKey::TrainMetricPasses, "train_metric_passes"},
  }};
};
}  // namespace strata

namespace strata::strategies {

// A set of ImplKeys: which settings a scenario (or a space) fixes itself.
class ImplKeys {
 public:
  void add(ImplKey k) { bits_ |= bit(k); }
  bool has(ImplKey k) const { return (bits_ & bit(k)) != 0; }
  ImplKeys operator|(ImplKeys o) const {
    ImplKeys r;
    r.bits_ = bits_ | o.bits_;
    return r;
  }
  bool operator==(const ImplKeys&) const = default;

 private:
  static_assert(enum_count<ImplKey>() <= 32);
  static std::uint32_t bit(ImplKey k) { return std::uint32_t{1} << static_cast<unsigned>(k); }
  std::uint32_t bits_ = 0;
};

// One setting of a stack: a value, or values by one of the plan's settings.
struct StackSetting {
  // TensorParallel: the plan's tp above 1 (case "true") or not ("false").
  enum class By : std::uint8_t { Always, Precision, Schedule, Zero, TensorParallel };
  ImplKey key = ImplKey::Attention;
  By by = By::Always;
  // (the plan's value of `by` as its enum's number or ZeRO stage, the
  // setting's value as its enum's number or 0/1)
  std::vector<std::pair<std::int64_t, std::int64_t>> cases;
  std::int64_t otherwise = 0;  // Always: the value; else the plans no case names
  std::string source;                     // where the framework sets it
};

struct Stack {
  std::string name;         // the preset's name, or the file it was read from
  std::string description;  // the framework and version it describes
  // The engine family `strata export --to` names ("megatron", "deepspeed",
  // "torchtitan"), or another framework's name; "" when the file gives none.
  std::string engine;
  std::vector<StackSetting> settings;
  // The plans this framework cannot launch (capability.hpp); none listed:
  // none refused.
  std::vector<CapabilityRule> capabilities;
};

// "standard", "true", or "bf16: true; otherwise false": the setting's
// values as a person reads them.
std::string setting_text(const StackSetting& st);

// Sets each of the stack's settings that `fixed` does not hold, for this
// plan's precision, schedule and ZeRO stage.
void apply_stack(const Stack& stack, Plan& plan, ImplKeys fixed);

// A setting's value in `im`, as StackSetting stores it, and as text.
std::int64_t implementation_value(const Implementation& im, ImplKey k);
std::string implementation_text(ImplKey k, std::int64_t v);
// Whether setting `k` can change anything in `plan`: context parallelism's
// algorithm needs cp > 1, tensor parallelism's backward overlap tp > 1, its
// saved input sequence parallelism as well; every other key is taken to act.
bool implementation_acts(ImplKey k, const Plan& plan);

// The settings an explored space sets per point (its implementation axes):
// a stack does not override them.
class Space;
ImplKeys implementation_axes(const Space& space);

// Reading (stack_io.cpp). A stack is a bundled name ("megatron-lm-2021") or
// a file path; throws InputError naming the file, the JSON path and the rule.
Stack read_stack(const JsonReader& r, const std::string& base_dir);
Stack bundled_stack(std::string_view name);
std::vector<std::string> stack_names();

}  // namespace strata::strategies
