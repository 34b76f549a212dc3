#include "lowering/step_layout.hpp"

namespace strata::strategies {

LayerPlan plan_layers(const Scenario& sc, const StepCosts& costs, const MemoryRules& rules) {
  if (!needs_solver(sc.plan)) return fixed_layers(sc.plan, chunk_layers(sc.plan, sc.model.layers));
  return plan_layers(MemoryModel(sc, rules), costs);
}

StepLayout::StepLayout(const Scenario& sc, const StepCosts& costs, const LayerPlan* layers)
    : chain_(cost::expand(sc.model, expand_options(sc))),
      rules_(ActivationRule::of(chain_, sc)),
      chunks_(chunk_layers(sc.plan, sc.model.layers)),
      p_(static_cast<int>(sc.plan.pp)),
      v_(static_cast<int>(sc.plan.virtual_stages)),
      m_(static_cast<int>(microbatches(sc.plan, sc.batch))),
      per_(bytes_per_param(sc.plan)),
      reduced_grad_bytes_(reduced_grad_bytes(sc.plan)),
      layers_(layers ? *layers : plan_layers(sc, costs)) {
  first_layer_.assign(chunks_.size() + 1, 0);
  for (std::size_t k = 0; k < chunks_.size(); ++k) first_layer_[k + 1] = first_layer_[k] + chunks_[k];
}

std::span<const Keep> StepLayout::chunk_keeps(int k) const {
  const auto at = static_cast<std::size_t>(k);
  return {layers_.keeps.data() + first_layer_[at], static_cast<std::size_t>(chunks_[at])};
}

Bytes StepLayout::layer_stored(int k, std::int64_t i) const {
  return rule(first_layer_[static_cast<std::size_t>(k)] + i).stored(chunk_keeps(k)[static_cast<std::size_t>(i)]);
}

Bytes StepLayout::layer_swapped(int k, std::int64_t i) const {
  const std::int64_t layer = first_layer_[static_cast<std::size_t>(k)] + i;
  const auto at = static_cast<std::size_t>(layer);
  return rule(layer).swapped(layers_.keeps[at], layers_.swaps[at]);
}


}  // namespace strata::strategies
