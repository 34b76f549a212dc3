#include "strategies/step_layout.hpp"

#include <algorithm>

namespace strata::strategies {

RecomputeTimes recompute_times(const Scenario& sc, const cost::OpChain& chain, const StepCosts& costs) {
  const Plan& p = sc.plan;
  RecomputeTimes t;
  t.layer = costs.layer(chain.block, Pass::Recompute);
  for (const auto& [kind, on] : {std::pair{CommKind::TP, p.tp > 1}, std::pair{CommKind::CP, p.cp > 1},
                                 std::pair{CommKind::EP, p.ep > 1}})
    if (on) t.layer += std::max<Time>(0, costs.layer_comm(kind, Pass::Forward));
  t.core = costs.layer(chain.block, Pass::Recompute, true);
  return t;
}

Keeps plan_keeps(const Scenario& sc, const StepCosts& costs, const MemoryRules& rules) {
  if (sc.plan.recompute != Recompute::Optimal)
    return fixed_keeps(sc.plan, chunk_layers(sc.plan, sc.model.layers));
  const MemoryModel model(sc, rules);
  return optimal_keeps(model, memory_budget(sc, rules), recompute_times(sc, model.chain(), costs));
}

StepLayout::StepLayout(const Scenario& sc, const StepCosts& costs)
    : chain_(cost::expand(sc.model, expand_options(sc))),
      rule_(ActivationRule::of(chain_)),
      chunks_(chunk_layers(sc.plan, sc.model.layers)),
      p_(static_cast<int>(sc.plan.pp)),
      v_(static_cast<int>(sc.plan.virtual_stages)),
      m_(static_cast<int>(microbatches(sc.plan, sc.batch))),
      per_(bytes_per_param(sc.plan.optimizer, sc.plan.precision,
                           sc.plan.implementation.fp32_grad_accumulation)),
      keeps_(plan_keeps(sc, costs)) {
  first_layer_.assign(chunks_.size() + 1, 0);
  for (std::size_t k = 0; k < chunks_.size(); ++k) first_layer_[k + 1] = first_layer_[k] + chunks_[k];
}

std::span<const Keep> StepLayout::chunk_keeps(int k) const {
  const auto at = static_cast<std::size_t>(k);
  return {keeps_.data() + first_layer_[at], static_cast<std::size_t>(chunks_[at])};
}

Bytes StepLayout::layer_stored(int k, std::int64_t i) const {
  return rule_.stored(chunk_keeps(k)[static_cast<std::size_t>(i)]);
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
