#include "strategies/space.hpp"

#include <limits>

#include <algorithm>
#include <cstdio>

#include "sim/error.hpp"

#include "strategies/scenario.hpp"
#include "strategies/validate.hpp"

namespace strata::strategies {

namespace {

// Calls f(E{}) with the enum type of an enum axis.
template <class F>
auto visit_enum(Axis a, F&& f) {
  switch (a) {
    case Axis::Schedule: return f(Schedule{});
    case Axis::PipelineLayout: return f(PipelineLayout{});
    case Axis::Recompute: return f(Recompute{});
    case Axis::Offload: return f(OffloadChoice{});
    case Axis::OffloadOptimizer: return f(OffloadTarget{});
    case Axis::OffloadPlanner: return f(OffloadPlanner{});
    case Axis::Compression: return f(CompressionMethod{});
    case Axis::Optimizer: return f(Optimizer{});
    case Axis::Precision: return f(Precision{});
    case Axis::Fp8Recipe: return f(cost::Fp8Recipe{});
    case Axis::DpTopology: return f(DpTopology{});
    case Axis::Attention: return f(AttentionKernel{});
    case Axis::TpCommOverlap: return f(TpCommOverlap{});
    case Axis::GradReduceDtype: return f(GradReduceDtype{});
    case Axis::CpComm: return f(CpComm{});
    default: break;
  }
  throw Error("axis " + std::string(enum_name(a)) + " is not an enum");
}

template <class E>
std::vector<AxisValue> all_of() {
  std::vector<AxisValue> out;
  for (const auto& [e, name] : EnumNames<E>::table) out.push_back({static_cast<std::int64_t>(e), 0});
  return out;
}

std::vector<AxisValue> ints(std::initializer_list<std::int64_t> vs) {
  std::vector<AxisValue> out;
  for (auto v : vs) out.push_back({v, 0});
  return out;
}

std::vector<AxisValue> divisors(std::int64_t n, std::int64_t at_most) {
  std::vector<AxisValue> out;
  for (std::int64_t d = 1; d <= n && d <= at_most; ++d)
    if (n % d == 0) out.push_back({d, 0});
  return out;
}

template <class E>
E as(const AxisValue& v) {
  return static_cast<E>(v.value);
}

}  // namespace

AxisKind axis_kind(Axis a) {
  switch (a) {
    case Axis::TP: case Axis::PP: case Axis::DP: case Axis::CP: case Axis::EP: case Axis::Zero:
    case Axis::VirtualStages: case Axis::Global: case Axis::Micro: case Axis::RecomputeK:
    case Axis::OffloadPrefetchDepth:
      return AxisKind::Int;
    case Axis::SequenceParallel: case Axis::OffloadActivations: case Axis::OffloadWeights:
    case Axis::FusedElementwise: case Axis::OverlapGradReduce: case Axis::OverlapParamGather:
    case Axis::PpScatterGather: case Axis::OverlapP2p: case Axis::Fp32GradAccumulation:
      return AxisKind::Bool;
    default:
      return AxisKind::Enum;
  }
}

bool is_system_axis(Axis a) {
  switch (a) {
    case Axis::TP: case Axis::PP: case Axis::CP: case Axis::EP: case Axis::Zero:
    case Axis::Schedule: case Axis::Micro: case Axis::SequenceParallel: case Axis::Recompute:
    case Axis::Offload: case Axis::OverlapGradReduce: case Axis::OverlapP2p:
      return true;
    default:
      return false;
  }
}

std::vector<AxisValue> auto_values(Axis a, const Scenario& base, bool coupled_schedule) {
  const auto& m = base.model;
  const auto& c = base.cluster;
  // A layer chain's stages are not split, nor recomputed selectively, nor
  // multiplied in FP8 (validate.cpp's chain rules).
  const bool chain = m.chain.has_value();
  switch (a) {
    case Axis::TP: return chain ? ints({1}) : divisors(m.heads, c.node.gpus_per_node);
    case Axis::PP: return divisors(c.gpus(), m.layers);
    case Axis::DP: return {};  // derived, never an axis of its own under "auto"
    case Axis::CP: return ints({1});
    case Axis::EP: return m.moe ? divisors(m.moe->experts, m.moe->experts) : ints({1});
    case Axis::SequenceParallel: return chain ? ints({0}) : ints({0, 1});
    case Axis::Zero: return ints({0, 1, 2, 3});
    case Axis::Schedule: {
      std::vector<AxisValue> out = {{static_cast<std::int64_t>(Schedule::GPipe), 0},
                                    {static_cast<std::int64_t>(Schedule::OneFOneB), 0}};
      const auto il = static_cast<std::int64_t>(Schedule::Interleaved);
      if (coupled_schedule) {
        out[0].virtual_stages = out[1].virtual_stages = 1;
        // Interleaving needs pp ≥ 2, so v ≤ layers / 2 chunks per stage.
        for (std::int64_t v : {2, 3, 4})
          if (2 * v <= m.layers) out.push_back({il, v});
      } else {
        out.push_back({il, 0});
      }
      return out;
    }
    case Axis::VirtualStages: return ints({1, 2, 3, 4});
    case Axis::PipelineLayout:
      if (chain) return ints({static_cast<std::int64_t>(PipelineLayout::Balanced)});
      // Splits weighed by GPU speed or memory where the stages' GPUs differ.
      if (c.heterogeneous())
        return ints({static_cast<std::int64_t>(PipelineLayout::Balanced),
                     static_cast<std::int64_t>(PipelineLayout::GpuSpeed),
                     static_cast<std::int64_t>(PipelineLayout::GpuMemory)});
      return ints({static_cast<std::int64_t>(PipelineLayout::Balanced),
                   static_cast<std::int64_t>(PipelineLayout::EmbeddingHeadAsLayers)});
    case Axis::Global: return {};  // must be listed
    case Axis::Micro: {
      std::vector<AxisValue> out;
      for (std::int64_t mb : {1, 2, 4, 8})
        if (base.batch.global % mb == 0) out.push_back({mb, 0});
      return out;
    }
    case Axis::Recompute: {
      // optimal plans within the GPU's memory less the margin
      // (memory_budget): never slower than the fixed policies that fit.
      std::vector<AxisValue> out = {{static_cast<std::int64_t>(Recompute::None), 0},
                                    {static_cast<std::int64_t>(Recompute::Selective), 0},
                                    {static_cast<std::int64_t>(Recompute::Full), 0},
                                    {static_cast<std::int64_t>(Recompute::Optimal), 0}};
      if (chain) {
        out.erase(out.begin() + 1);
        return out;
      }
      // torchtitan's op-level policy, where the scenario's stack can launch
      // it (its capabilities; a stack that refuses it, or none, searches
      // Megatron-LM's vocabulary above).
      if (base.stack) {
        Plan probe;  // the defaults: only a rule about the policy refuses it
        probe.recompute = Recompute::SelectiveOp;
        if (!launch_violation(*base.stack, probe))
          out.push_back({static_cast<std::int64_t>(Recompute::SelectiveOp), 0});
      }
      return out;
    }
    case Axis::RecomputeK: return {};  // must be listed
    case Axis::Offload:
      return {{static_cast<std::int64_t>(OffloadChoice::None), 0},
              {static_cast<std::int64_t>(OffloadChoice::Activations), 0},
              {static_cast<std::int64_t>(OffloadChoice::Optimizer), 0}};
    case Axis::OffloadOptimizer: {
      std::vector<AxisValue> out = {{static_cast<std::int64_t>(OffloadTarget::None), 0},
                                    {static_cast<std::int64_t>(OffloadTarget::Cpu), 0}};
      if (c.node.nvme_GiB > 0) out.push_back({static_cast<std::int64_t>(OffloadTarget::Nvme), 0});
      return out;
    }
    case Axis::OffloadPrefetchDepth: return ints({0, 1, 2});
    case Axis::Precision: {
      std::vector<AxisValue> out;
      for (const auto& [p, name] : EnumNames<Precision>::table)
        if (c.gpu.peak_tflops(p) > 0 && !(chain && cost::quantized_gemms(p)))
          out.push_back({static_cast<std::int64_t>(p), 0});
      return out;
    }
    default: break;
  }
  if (axis_kind(a) == AxisKind::Bool) return ints({0, 1});
  return visit_enum(a, [](auto e) { return all_of<decltype(e)>(); });
}

std::string value_name(Axis a, const AxisValue& v) {
  switch (axis_kind(a)) {
    case AxisKind::Int: return std::to_string(v.value);
    case AxisKind::Bool: return v.value ? "true" : "false";
    case AxisKind::Enum: break;
  }
  std::string s = visit_enum(a, [&](auto e) {
    return std::string(enum_name(static_cast<decltype(e)>(v.value)));
  });
  if (a == Axis::Schedule && v.virtual_stages > 1) s += ":" + std::to_string(v.virtual_stages);
  return s;
}

std::uint64_t Space::size() const {
  // Saturates: a space too large to count is larger than any limit.
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t n = 1;
  for (const auto& ax : axes) {
    const std::uint64_t k = ax.values.size();
    if (k == 0) return 0;
    n = n > kMax / k ? kMax : n * k;
  }
  return n;
}

const SpaceAxis* Space::find(Axis a) const {
  for (const auto& ax : axes)
    if (ax.axis == a) return &ax;
  return nullptr;
}

std::optional<std::string_view> omitted_default(std::string_view axis) {
  if (enum_from_name<Axis>(axis) == Axis::PipelineLayout) return enum_name(PipelineLayout::Balanced);
  if (enum_from_name<Axis>(axis) == Axis::Fp8Recipe) return enum_name(cost::Fp8Recipe::Delayed);
  if (enum_from_name<Axis>(axis) == Axis::GradReduceDtype) return enum_name(GradReduceDtype::Accumulation);
  if (enum_from_name<Axis>(axis) == Axis::CpComm) return enum_name(CpComm::P2p);
  return std::nullopt;
}

void Space::apply(std::uint64_t index, Plan& p, Batch& b) const {
  // Mixed radix, last axis fastest.
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    const std::uint64_t n = it->values.size();
    const AxisValue& v = it->values[static_cast<std::size_t>(index % n)];
    index /= n;
    const bool on = v.value != 0;
    switch (it->axis) {
      case Axis::TP: p.tp = v.value; break;
      case Axis::PP: p.pp = v.value; break;
      case Axis::DP: p.dp = v.value; break;
      case Axis::CP: p.cp = v.value; break;
      case Axis::EP: p.ep = v.value; break;
      case Axis::Zero: p.zero = v.value; break;
      case Axis::Schedule:
        p.schedule = as<Schedule>(v);
        if (v.virtual_stages > 0) p.virtual_stages = v.virtual_stages;
        break;
      case Axis::VirtualStages: p.virtual_stages = v.value; break;
      case Axis::PipelineLayout: p.pipeline_layout = as<PipelineLayout>(v); break;
      case Axis::Global: b.global = v.value; break;
      case Axis::Micro: b.micro = v.value; break;
      case Axis::SequenceParallel: p.sequence_parallel = on; break;
      case Axis::Recompute: p.recompute = as<Recompute>(v); break;
      case Axis::RecomputeK: p.recompute_k = v.value; break;
      case Axis::Offload: {
        const auto o = as<OffloadChoice>(v);
        p.offload.activations = o == OffloadChoice::Activations;
        p.offload.weights = o == OffloadChoice::Weights;
        p.offload.optimizer = o == OffloadChoice::Optimizer ? OffloadTarget::Cpu : OffloadTarget::None;
        break;
      }
      case Axis::OffloadActivations: p.offload.activations = on; break;
      case Axis::OffloadWeights: p.offload.weights = on; break;
      case Axis::OffloadOptimizer: p.offload.optimizer = as<OffloadTarget>(v); break;
      case Axis::OffloadPrefetchDepth: p.offload.prefetch_depth = v.value; break;
      case Axis::OffloadPlanner: p.offload.planner = as<OffloadPlanner>(v); break;
      case Axis::Compression: p.compression.method = as<CompressionMethod>(v); break;
      case Axis::Optimizer: p.optimizer = as<Optimizer>(v); break;
      case Axis::Precision: p.precision = as<Precision>(v); break;
      case Axis::Fp8Recipe: p.fp8_recipe = as<cost::Fp8Recipe>(v); break;
      case Axis::DpTopology: p.dp_topology = as<DpTopology>(v); break;
      case Axis::Attention: p.implementation.attention = as<AttentionKernel>(v); break;
      case Axis::FusedElementwise: p.implementation.fused_elementwise = on; break;
      case Axis::OverlapGradReduce: p.implementation.overlap_grad_reduce = on; break;
      case Axis::OverlapParamGather: p.implementation.overlap_param_gather = on; break;
      case Axis::TpCommOverlap: p.implementation.tp_comm_overlap = as<TpCommOverlap>(v); break;
      case Axis::PpScatterGather: p.implementation.pp_scatter_gather = on; break;
      case Axis::OverlapP2p: p.implementation.overlap_p2p = on; break;
      case Axis::Fp32GradAccumulation: p.implementation.fp32_grad_accumulation = on; break;
      case Axis::GradReduceDtype: p.implementation.grad_reduce_dtype = as<GradReduceDtype>(v); break;
      case Axis::CpComm: p.implementation.cp_comm = as<CpComm>(v); break;
    }
  }
  if (derive_dp) {
    // A degree product that does not divide the GPUs leaves dp short of
    // them: the gpu-count rule rejects the point with its numbers.
    const std::int64_t model_parallel = p.tp * p.pp * p.cp;
    p.dp = std::max<std::int64_t>(1, gpus / model_parallel);
  }
  if (balance_stages) p.stage_layers.clear();
}

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : bytes) {
    h ^= ch;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t plan_id(const Plan& plan, const Batch& batch) {
  return fnv1a64(canonical_json(plan, batch));
}

std::string plan_id_hex(std::uint64_t id) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

std::optional<std::uint64_t> parse_plan_id(std::string_view hex) {
  if (hex.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  for (char ch : hex) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else return std::nullopt;
    v = v * 16 + static_cast<std::uint64_t>(d);
  }
  return v;
}

}  // namespace strata::strategies
