#pragma once
// What each transformer block keeps from its forward for its backward, and
// where: every recompute policy of a plan becomes one choice per layer (the
// fixed policies a pattern, "optimal" the solver's choice within a memory
// budget), and every activation-offload planner one choice of what each
// layer moves to host memory (plan_layers; docs/remat.md). The memory model, both step lowerings and the CPU executor
// read these choices, so they cannot disagree about what a layer keeps,
// reruns or moves.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "costmodel/ops.hpp"
#include "sim/units.hpp"
#include "strategies/plan.hpp"

namespace strata::strategies {

class MemoryModel;
class StepCosts;

enum class Keep : std::uint8_t {
  All,        // every saved tensor: nothing recomputed
  Selective,  // what the plan's selective policy stores (selective_policy: Megatron-LM's
              // all but its recompute modules — the attention core by default —,
              // torchtitan's op policy its save list); the rest rerun just before its
              // backward
  Input,      // only its input: it begins a segment (alone, full recompute) that is
              // rerun layer by layer before the backward of the segment's last layer
  Nothing,    // nothing: a later layer of the segment begun by the nearest Input before it
};

// One choice per layer of the model, in global layer order.
using Keeps = std::vector<Keep>;

// What a layer's saved tensors do between its forward and its backward.
enum class Swap : std::uint8_t {
  None,          // stay on the GPU
  Saved,         // all of them go to host memory and come back before its backward
  LinearInputs,  // the inputs of its linear layers go (vDNN), the rest stay
};
using Swaps = std::vector<Swap>;

// Every layer's choices, in global layer order.
struct LayerPlan {
  Keeps keeps;
  Swaps swaps;  // all None without activation offload
  bool operator==(const LayerPlan&) const = default;
};

// The model chunks' layers (chunk_layers) looked up both ways, as the
// executors walk them: each chunk's size and first layer, each layer's
// chunk, and the slice of a LayerPlan's choices that is a layer's chunk.
struct ChunkMap {
  ChunkMap() = default;
  ChunkMap(const Plan& plan, std::int64_t layers);
  std::vector<std::int64_t> size;   // layers per chunk
  std::vector<std::int64_t> first;  // each chunk's first layer, and the layer count last
  std::vector<int> of_layer;        // each layer's chunk
  int chunks() const { return static_cast<int>(size.size()); }
  // The layer's position in its chunk.
  std::int64_t index_in_chunk(std::int64_t layer) const {
    return layer - first[static_cast<std::size_t>(of_layer[static_cast<std::size_t>(layer)])];
  }
  // The choices of the layer's chunk, in forward order.
  std::span<const Keep> chunk_keeps(const Keeps& keeps, std::int64_t layer) const {
    const auto k = static_cast<std::size_t>(of_layer[static_cast<std::size_t>(layer)]);
    return {keeps.data() + first[k], static_cast<std::size_t>(size[k])};
  }
};

// Layer i (Input or Nothing) of a chunk belongs to the segment that begins
// at the returned layer. Throws Error when no Input precedes it.
std::int64_t segment_start(std::span<const Keep> chunk, std::int64_t i);
// Whether layer i ends a segment: its backward is preceded by the rerun of
// the whole segment.
bool segment_end(std::span<const Keep> chunk, std::int64_t i);

// Layers per segment of every_k (recompute_k) and sqrt (⌈√n⌉) in a chunk of n.
std::int64_t recompute_segment(const Plan& plan, std::int64_t n);

// The fixed policies as patterns, chunk by chunk (`chunk_layers`, in
// pipeline order): none keeps All, selective and selective_op Selective,
// every_nth Input at every n-th layer and All elsewhere, full Input, every_k
// and sqrt Input at each segment's first layer and Nothing after it. Throws
// Error for optimal, which the solver decides.
Keeps fixed_keeps(const Plan& plan, const std::vector<std::int64_t>& chunk_layers);

// One letter per layer: A(ll), S(elective), I(nput), N(othing).
std::string keeps_pattern(std::span<const Keep> keeps);
// One letter per layer: - (stays), H (to host), L (linear inputs to host).
std::string swaps_pattern(std::span<const Swap> swaps);

// Layers of each kind.
struct KeepCounts {
  std::int64_t all = 0, selective = 0, input = 0, nothing = 0;
};
KeepCounts count_keeps(std::span<const Keep> keeps);

// --- planning ------------------------------------------------------------

// A layer's times on one microbatch, as the lowering charges them:
// forward and backward with their blocking tensor/context/expert-parallel
// communication, the rerun forward of a recomputed layer (with its
// communication) and of the attention core alone, and the copy back from
// host memory of all it keeps without recompute.
struct LayerTimes {
  Time fwd = 0, bwd = 0;
  Time recompute = 0, core = 0;
  Time copy_in = 0;
  // Each field the most of any of `times`.
  static LayerTimes largest(std::span<const LayerTimes> times);
};
// Of one kind of block.
LayerTimes layer_times(const Plan& plan, const cost::Layer& block, const StepCosts& costs);

// Whether the plan's choices are searched (optimal recompute; the lifetime,
// priority and joint offload planners) rather than fixed patterns.
bool needs_solver(const Plan& plan);

// The fixed patterns: fixed_keeps, and the offload planners that need no
// search: all (every layer's saved tensors) and vdnn (the inputs of each
// layer's linear layers: Rhu et al. 2016 offload convolution inputs).
// Throws Error for plans that need_solver.
LayerPlan fixed_layers(const Plan& plan, const std::vector<std::int64_t>& chunk_layers);

// Every plan's choices (docs/remat.md, "Transformer plans"), stage by stage
// within memory_budget:
// - recompute optimal: the layers' choices (keep all, selective, or
//   segments rerun from their input) with the least recompute time per
//   microbatch whose stage peak fits; when none fits, the least peak. Within
//   a chunk, segments first, then selective layers, then layers that keep
//   all; each stage's chunks share one choice of counts.
// - offload planner lifetime (Le et al. 2018): a layer's saved tensors leave
//   after its forward and come back before its backward only where both
//   copies hide behind the chunk pass's compute (each copy engine serial).
// - priority (AutoSwap, Zhang et al. 2019): layers scored by bytes × idle
//   time (from the end of their forward to the start of their backward,
//   microbatches in flight included), swapped best first until the stage
//   fits.
// - joint (recompute optimal): per layer keep, recompute or swap. The
//   candidates: the optimal search with swapped layers first in each chunk
//   (the longest idle times), timed by recompute plus the copies' estimated
//   stall (what a swapped layer's prefetch exceeds of a layer's backward),
//   and again with copies assumed hidden; optimal recompute alone; none,
//   selective and full; each other planner over layers that keep all. Of
//   those that fit, the fastest step, each lowered and replayed at the
//   layer level (predict_step); on equal steps, the fewest layers swapped.
// `costs` times the layers; fixed plans do not use it.
LayerPlan plan_layers(const MemoryModel& model, const StepCosts& costs);

}  // namespace strata::strategies
