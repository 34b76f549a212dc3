#pragma once
// The plan space a scenario searches (`"space"` in a scenario, docs/explore.md):
// axes named by the plan's keys (dotted for nested ones: `batch.micro`,
// `offload.activations`, `implementation.overlap_grad_reduce`), each with a
// list of values; axes it does not list keep the plan's value. `"auto"` is
// resolved against the model and cluster when the scenario is read, so a
// Space holds concrete values only.
//
// The cartesian product is never materialised: plan number `index` (0 ≤ index
// < size()) is a mixed-radix number over the axes in their canonical order
// (the order of `Axis`), so a shard or a resumed run starts anywhere for free.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/names.hpp"
#include "strategies/plan.hpp"

namespace strata {
class JsonReader;
}

namespace strata::strategies {

struct Scenario;

// Every axis a space may list, in canonical (enumeration) order: the last
// axis varies fastest.
enum class Axis : std::uint8_t {
  TP,
  PP,
  DP,
  CP,
  EP,
  Zero,
  Schedule,
  VirtualStages,
  PipelineLayout,
  Global,  // batch.global: changes what is trained; never in "auto"
  Micro,   // batch.micro
  SequenceParallel,
  Recompute,
  RecomputeK,
  Offload,  // composite: none | activations | weights | optimizer (to CPU)
  OffloadActivations,
  OffloadWeights,
  OffloadOptimizer,
  OffloadPrefetchDepth,
  OffloadPlanner,
  Compression,  // compression.method
  Optimizer,
  Precision,
  Fp8Recipe,  // plan.fp8_recipe (precision fp8 only)
  DpTopology,
  Attention,
  FusedElementwise,
  OverlapGradReduce,
  OverlapParamGather,
  TpCommOverlap,
  PpScatterGather,
  OverlapP2p,
  Fp32GradAccumulation,
  GradReduceDtype,
  CpComm,  // implementation.cp_comm
};

enum class AxisKind : std::uint8_t { Int, Bool, Enum };
AxisKind axis_kind(Axis a);
// Whether `"space": "auto"` opens the axis (a system axis); algorithmic axes
// (optimizer, precision, compression, asynchronous schedules, batch) are
// searched only when listed.
bool is_system_axis(Axis a);

// The composite `offload` axis.
enum class OffloadChoice : std::uint8_t { None, Activations, Weights, Optimizer };

struct AxisValue {
  // The integer; 0/1 for a bool; the enum's value (static_cast) for an enum.
  std::int64_t value = 0;
  // Schedule axis only: the virtual stages the value sets (0: leaves them to
  // the plan or the virtual_stages axis). "interleaved:3" sets 3.
  std::int64_t virtual_stages = 0;
  bool operator==(const AxisValue&) const = default;
};

struct SpaceAxis {
  Axis axis;
  std::vector<AxisValue> values;  // non-empty, no duplicates
};

class Space {
 public:
  std::vector<SpaceAxis> axes;  // in canonical order, each axis at most once
  // dp = GPUs / (tp·pp·cp) at every point (dp is not listed and a degree is).
  bool derive_dp = false;
  // The plan's explicit stage_layers are dropped at every point (pp, virtual
  // stages or schedule are searched, so one partition cannot fit them all).
  bool balance_stages = false;
  std::int64_t gpus = 1;  // the cluster's GPUs

  // Number of plans: the product of the axes' sizes (1 with no axes).
  std::uint64_t size() const;  // saturates at the largest std::uint64_t
  const SpaceAxis* find(Axis a) const;
  // Plan number `index` < size(): the base plan and batch with this point's
  // values applied.
  void apply(std::uint64_t index, Plan& plan, Batch& batch) const;
};

// The values behind "auto" for one axis, given the scenario's model, cluster
// and batch (docs/explore.md lists them). `coupled_schedule`: the schedule's
// interleaved values carry virtual stages 2, 3, 4 (virtual_stages is not an
// axis of its own).
std::vector<AxisValue> auto_values(Axis a, const Scenario& base, bool coupled_schedule);

// "8", "true", "interleaved", "interleaved:3", "activations".
std::string value_name(Axis a, const AxisValue& v);

// Reads a scenario's `space` ("auto" or an object of axes), strictly: unknown
// axes, wrong types and duplicate values throw InputError with the JSON path
// (`space.tp[2]`). `base` holds the model, cluster, batch and plan already read.
Space read_space(const JsonReader& r, const Scenario& base);

// What a record means by an axis's key that canonical_json leaves out where
// it holds the default ("balanced" for pipeline_layout); nothing for an
// axis canonical_json always writes (or that does not apply: "-").
std::optional<std::string_view> omitted_default(std::string_view axis);

// The canonical JSON of a point: `{"batch":{…},"plan":{…}}` with every plan
// key (only those that apply: `recompute_k` with every_k, compression keys of
// its method), keys sorted, no spaces. A scenario's `plan` and `batch` read
// back from it give the same Plan and Batch.
std::string canonical_json(const Plan& plan, const Batch& batch);
// FNV-1a 64 of canonical_json: the plan id, the resume key of explore.
std::uint64_t plan_id(const Plan& plan, const Batch& batch);
std::uint64_t fnv1a64(std::string_view bytes);
// 16 lower-case hex digits; parse_plan_id is its inverse (nothing on bad input).
std::string plan_id_hex(std::uint64_t id);
std::optional<std::uint64_t> parse_plan_id(std::string_view hex);

}  // namespace strata::strategies

namespace strata {

template <>
struct EnumNames<strategies::Axis> {
  using A = strategies::Axis;
  // Sized by its entries; enum_count checks that they are every axis, in order.
  static constexpr auto table = std::to_array<std::pair<A, std::string_view>>({
      {A::TP, "tp"},
      {A::PP, "pp"},
      {A::DP, "dp"},
      {A::CP, "cp"},
      {A::EP, "ep"},
      {A::Zero, "zero"},
      {A::Schedule, "schedule"},
      {A::VirtualStages, "virtual_stages"},
      {A::PipelineLayout, "pipeline_layout"},
      {A::Global, "batch.global"},
      {A::Micro, "batch.micro"},
      {A::SequenceParallel, "sequence_parallel"},
      {A::Recompute, "recompute"},
      {A::RecomputeK, "recompute_k"},
      {A::Offload, "offload"},
      {A::OffloadActivations, "offload.activations"},
      {A::OffloadWeights, "offload.weights"},
      {A::OffloadOptimizer, "offload.optimizer"},
      {A::OffloadPrefetchDepth, "offload.prefetch_depth"},
      {A::OffloadPlanner, "offload.planner"},
      {A::Compression, "compression.method"},
      {A::Optimizer, "optimizer"},
      {A::Precision, "precision"},
      {A::Fp8Recipe, "fp8_recipe"},
      {A::DpTopology, "dp_topology"},
      {A::Attention, "implementation.attention"},
      {A::FusedElementwise, "implementation.fused_elementwise"},
      {A::OverlapGradReduce, "implementation.overlap_grad_reduce"},
      {A::OverlapParamGather, "implementation.overlap_param_gather"},
      {A::TpCommOverlap, "implementation.tp_comm_overlap"},
      {A::PpScatterGather, "implementation.pp_scatter_gather"},
      {A::OverlapP2p, "implementation.overlap_p2p"},
      {A::Fp32GradAccumulation, "implementation.fp32_grad_accumulation"},
      {A::GradReduceDtype, "implementation.grad_reduce_dtype"},
      {A::CpComm, "implementation.cp_comm"},
  });
};

template <>
struct EnumNames<strategies::OffloadChoice> {
  using O = strategies::OffloadChoice;
  static constexpr std::array<std::pair<O, std::string_view>, 4> table{{
      {O::None, "none"},
      {O::Activations, "activations"},
      {O::Weights, "weights"},
      {O::Optimizer, "optimizer"},
  }};
};

}  // namespace strata

namespace strata::strategies {
inline constexpr std::size_t kAxes = enum_count<Axis>();
}  // namespace strata::strategies
