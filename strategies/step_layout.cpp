#include "strategies/step_layout.hpp"

namespace strata::strategies {

StepLayout::StepLayout(const Scenario& sc)
    : chain_(cost::expand(sc.model, expand_options(sc))),
      rule_(ActivationRule::of(sc.plan, chain_)),
      chunks_(chunk_layers(sc.plan, sc.model.layers)),
      p_(static_cast<int>(sc.plan.pp)),
      v_(static_cast<int>(sc.plan.virtual_stages)),
      m_(static_cast<int>(microbatches(sc.plan, sc.batch))),
      per_(bytes_per_param(sc.plan.optimizer, sc.plan.precision,
                           sc.plan.implementation.fp32_grad_accumulation)) {
  first_layer_.assign(chunks_.size() + 1, 0);
  for (std::size_t k = 0; k < chunks_.size(); ++k) first_layer_[k + 1] = first_layer_[k] + chunks_[k];
}

Bytes StepLayout::layer_stored(std::int64_t i, std::int64_t n) const {
  switch (rule_.policy) {
    case Recompute::None: return rule_.full;
    case Recompute::Selective: return rule_.selective;
    case Recompute::Full: return rule_.input;
    default: return i % rule_.segment(n) == 0 ? rule_.input : 0;
  }
}

Bytes StepLayout::p2p_bytes(const Scenario& sc) const {
  const auto& plan = sc.plan;
  const double e = static_cast<double>(cost::activation_bytes(plan.precision));
  const double split = (plan.sequence_parallel || plan.implementation.pp_scatter_gather)
                           ? static_cast<double>(plan.tp)
                           : 1.0;
  return static_cast<Bytes>(static_cast<double>(sc.batch.micro) *
                            static_cast<double>(sc.model.seq_len / plan.cp) *
                            static_cast<double>(sc.model.hidden) * e / split);
}

}  // namespace strata::strategies
