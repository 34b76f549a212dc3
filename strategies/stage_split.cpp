#include "strategies/stage_split.hpp"

#include <algorithm>
#include <numeric>

#include "costmodel/calibration.hpp"
#include "costmodel/time_model.hpp"
#include "strategies/rank_mesh.hpp"

namespace strata::strategies {

bool weighs_stages(PipelineLayout layout) {
  return layout == PipelineLayout::GpuSpeed || layout == PipelineLayout::GpuMemory;
}

std::vector<double> stage_weights(const Plan& plan, const Batch& batch, const cost::ModelSpec& model,
                                  const cost::ClusterSpec& cluster, const std::vector<cost::Calibration>* curves) {
  const auto on = stage_groups(plan, cluster);
  // Each group's weight; a stage's is its weakest group's.
  std::vector<cost::GpuSpec> gpus;
  if (cluster.heterogeneous())
    for (const auto& g : cluster.groups) gpus.push_back(g.gpu);
  else
    gpus.push_back(cluster.gpu);
  // One kind of GPU: every stage weighs the same, whatever the weight (and
  // explore's points need not price the model's blocks to learn it).
  if (gpus.size() == 1) return std::vector<double>(on.size(), 1.0);
  std::vector<double> group(gpus.size(), 0);
  if (plan.pipeline_layout == PipelineLayout::GpuMemory) {
    for (std::size_t g = 0; g < gpus.size(); ++g) group[g] = gpus[g].memory_GiB;
  } else {
    const cost::OpChain chain = cost::expand(model, expand_options(plan, batch));
    for (std::size_t g = 0; g < gpus.size(); ++g) {
      // A GPU without a peak for the precision gets no blocks to spare:
      // the plan is refused by validation (precision-supported) anyway.
      if (gpus[g].peak_tflops(plan.precision) <= 0) continue;
      const bool given = curves && g < curves->size();
      const cost::Calibration bundled = given ? cost::Calibration{} : cost::default_calibration(gpus[g]);
      const cost::Calibration& cal = given ? (*curves)[g] : bundled;
      // The model's blocks, each kind as often as the model has it.
      Time t = 0;
      const std::vector<std::int64_t> counts = chain.kind_counts(0, chain.blocks);
      for (std::size_t k = 0; k < chain.kinds.size(); ++k)
        for (const auto& op : chain.kinds[k].ops)
          t += counts[k] * (cost::op_time(gpus[g], cal, plan.precision, op, false, cost::LayerKind::Block,
                                          plan.fp8_recipe) +
                            cost::op_time(gpus[g], cal, plan.precision, op, true, cost::LayerKind::Block,
                                          plan.fp8_recipe));
      group[g] = t > 0 ? 1.0 / to_seconds(t) : 1.0;
    }
  }
  std::vector<double> w;
  for (const auto& groups : on) {
    double least = group[groups.front()];
    for (std::size_t g : groups) least = std::min(least, group[g]);
    w.push_back(least);
  }
  return w;
}

std::vector<std::int64_t> weighted_chunk_layers(const Plan& plan, std::int64_t blocks,
                                                const std::vector<double>& weights) {
  const std::int64_t p = plan.pp, v = plan.virtual_stages;
  if (p * v > blocks || static_cast<std::int64_t>(weights.size()) != p) return {};
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  // Every stage at least its v chunks of one block; the rest by weight.
  const std::int64_t spare = blocks - p * v;
  std::vector<std::int64_t> share(static_cast<std::size_t>(p), v);
  std::vector<std::pair<double, std::int64_t>> remainder;  // (fraction, stage)
  std::int64_t given = 0;
  for (std::int64_t s = 0; s < p; ++s) {
    const double exact = total > 0 ? weights[static_cast<std::size_t>(s)] / total * static_cast<double>(spare)
                                   : static_cast<double>(spare) / static_cast<double>(p);
    const auto whole = static_cast<std::int64_t>(exact);
    share[static_cast<std::size_t>(s)] += whole;
    given += whole;
    remainder.emplace_back(exact - static_cast<double>(whole), s);
  }
  // Largest remainders first; ties to the earlier stage.
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::int64_t i = 0; i < spare - given; ++i)
    share[static_cast<std::size_t>(remainder[static_cast<std::size_t>(i)].second)] += 1;
  std::vector<std::int64_t> out(static_cast<std::size_t>(p * v));
  for (std::int64_t s = 0; s < p; ++s)
    for (std::int64_t j = 0; j < v; ++j)
      out[static_cast<std::size_t>(j * p + s)] =
          share[static_cast<std::size_t>(s)] / v + (j < share[static_cast<std::size_t>(s)] % v ? 1 : 0);
  return out;
}

void resolve_stage_layers(Plan& plan, const Batch& batch, const cost::ModelSpec& model,
                          const cost::ClusterSpec& cluster, const std::vector<cost::Calibration>* curves) {
  if (!weighs_stages(plan.pipeline_layout) || !plan.stage_layers.empty() || model.chain) return;
  if (plan.pp < 1 || plan.virtual_stages < 1 || plan.gpus() != cluster.gpus()) return;
  plan.stage_layers = weighted_chunk_layers(plan, model.layers, stage_weights(plan, batch, model, cluster, curves));
}

}  // namespace strata::strategies
