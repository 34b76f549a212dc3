#pragma once
// What both levels of the step simulation derive from a scenario before
// timing anything: the op chain, the activation rule, the layers of each
// pipeline chunk, the schedule's sizes and the bytes per parameter. The
// layer-level lowering (lower.cpp) and the coarse level (coarse.cpp) both
// build on it, so they cannot disagree about the step's shape.
#include <cstdint>
#include <vector>

#include "costmodel/ops.hpp"
#include "strategies/memory.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

struct StepLayout {
  explicit StepLayout(const Scenario& sc);

  // Bytes layer i of an n-layer chunk keeps from its forward to its
  // backward under the recompute policy (a segment's checkpoint keeps its
  // input, the other layers of the segment nothing).
  Bytes layer_stored(std::int64_t i, std::int64_t n) const;
  // One pipeline send: a microbatch's activations (or their gradient)
  // between chunks, split over tp with sequence parallelism or scatter-gather.
  Bytes p2p_bytes(const Scenario& sc) const;

  cost::OpChain chain_;
  ActivationRule rule_;
  std::vector<std::int64_t> chunks_;       // layers per model chunk
  std::vector<std::int64_t> first_layer_;  // of each chunk, and the layer count last
  int p_, v_, m_;                          // stages, virtual chunks, microbatches
  PerParam per_;
};

}  // namespace strata::strategies
