#pragma once
// What each transformer block keeps from its forward for its backward. Every
// recompute policy of a plan becomes one choice per layer: the fixed
// policies a pattern, "optimal" the solver's choice within a memory budget
// (memory.hpp, optimal_keeps; docs/remat.md "Transformer plans"). The memory
// model, both step lowerings and the CPU executor read these choices, so
// they cannot disagree about what a layer keeps or reruns.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strategies/plan.hpp"

namespace strata::strategies {

enum class Keep : std::uint8_t {
  All,        // every saved tensor: nothing recomputed
  Selective,  // all but the attention core, recomputed just before its backward
  Input,      // only its input: it begins a segment (alone, full recompute) that is
              // rerun layer by layer before the backward of the segment's last layer
  Nothing,    // nothing: a later layer of the segment begun by the nearest Input before it
};

// One choice per layer of the model, in global layer order.
using Keeps = std::vector<Keep>;

// Layer i (Input or Nothing) of a chunk belongs to the segment that begins
// at the returned layer. Throws Error when no Input precedes it.
std::int64_t segment_start(std::span<const Keep> chunk, std::int64_t i);
// Whether layer i ends a segment: its backward is preceded by the rerun of
// the whole segment.
bool segment_end(std::span<const Keep> chunk, std::int64_t i);

// Layers per segment of every_k (recompute_k) and sqrt (⌈√n⌉) in a chunk of n.
std::int64_t recompute_segment(const Plan& plan, std::int64_t n);

// The fixed policies as patterns, chunk by chunk (`chunk_layers`, in
// pipeline order): none keeps All, selective Selective, full Input, every_k
// and sqrt Input at each segment's first layer and Nothing after it. Throws
// Error for optimal, which the solver decides.
Keeps fixed_keeps(const Plan& plan, const std::vector<std::int64_t>& chunk_layers);

// One letter per layer: A(ll), S(elective), I(nput), N(othing).
std::string keeps_pattern(std::span<const Keep> keeps);

// Layers of each kind.
struct KeepCounts {
  std::int64_t all = 0, selective = 0, input = 0, nothing = 0;
};
KeepCounts count_keeps(std::span<const Keep> keeps);

}  // namespace strata::strategies
