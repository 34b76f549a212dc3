#pragma once
// What both levels of the step simulation derive from a scenario before
// timing anything: the op chain, what each layer keeps for its backward, the
// layers of each pipeline chunk, the schedule's sizes and the bytes per
// parameter. The layer-level lowering (lower.cpp) and the coarse level
// (coarse.cpp) both build on it, so they cannot disagree about the step's
// shape.
#include <cstdint>
#include <span>
#include <vector>

#include "costmodel/ops.hpp"
#include "lowering/layer_plan.hpp"
#include "lowering/lower.hpp"
#include "lowering/memory.hpp"
#include "strategies/scenario.hpp"

namespace strata::strategies {

// What each layer keeps and where (plan_layers), timed by `costs`.
LayerPlan plan_layers(const Scenario& sc, const StepCosts& costs, const MemoryRules& rules = {});

struct StepLayout {
  // `layers`, when given, replaces plan_layers(sc, costs).
  StepLayout(const Scenario& sc, const StepCosts& costs, const LayerPlan* layers = nullptr);

  // Model chunk k's layers' choices, in forward order.
  std::span<const Keep> chunk_keeps(int k) const;
  // Bytes layer i of model chunk k keeps from its forward to its backward,
  // and of those what goes to host memory meanwhile.
  Bytes layer_stored(int k, std::int64_t i) const;
  Bytes layer_swapped(int k, std::int64_t i) const;
  // One pipeline send between model chunks `boundary` and boundary + 1
  // (p2p_message_bytes).
  Bytes p2p_bytes(const Scenario& sc, int boundary) const {
    return p2p_message_bytes(sc, chain_, first_layer_, boundary);
  }

  // What block `layer` (0-based, of the model) keeps under each choice: its
  // kind's rule.
  const ActivationRule& rule(std::int64_t layer) const {
    return rules_[static_cast<std::size_t>(chain_.kind_of[static_cast<std::size_t>(layer)])];
  }

  cost::OpChain chain_;
  std::vector<ActivationRule> rules_;      // per kind of block (chain_.kinds)
  std::vector<std::int64_t> chunks_;       // layers per model chunk
  std::vector<std::int64_t> first_layer_;  // of each chunk, and the layer count last
  int p_, v_, m_;                          // stages, virtual chunks, microbatches
  PerParam per_;
  double reduced_grad_bytes_;              // one gradient as every reduction moves it
  LayerPlan layers_;                       // per global layer
};

}  // namespace strata::strategies
