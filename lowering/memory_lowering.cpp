#include "lowering/memory_lowering.hpp"

#include <cmath>
#include <string>

#include "sim/engine.hpp"
#include "lowering/step_costs.hpp"

namespace strata::strategies {

MemoryEstimate simulate_memory(const Scenario& sc, const MemoryRules& rules) {
  const ModelStepCosts costs(sc);
  const LoweredStep low = lower_step(sc, costs);
  return memory_from_run(sc, low, sim::simulate(low.graph), rules);
}

MemoryEstimate memory_from_run(const Scenario& sc, const LoweredStep& low, const sim::RunResult& run,
                               const MemoryRules& rules) {
  std::vector<StageMemoryPeak> peaks;
  for (int s = 0; s < low.stages; ++s) {
    const auto& gpu = run.at(low.gpu_pool[static_cast<std::size_t>(s)]);
    peaks.push_back({gpu.peak, gpu.peak_by_tag, run.at(low.host_pool[static_cast<std::size_t>(s)]).peak});
  }
  return memory_from_peaks(sc, low.layers, peaks, rules);
}

MemoryEstimate memory_from_peaks(const Scenario& sc, const LayerPlan& layers, std::span<const StageMemoryPeak> peaks,
                                 const MemoryRules& rules) {
  MemoryEstimate est = estimate_memory(sc, rules, layers);
  using sim::MemTag;
  Bytes host_rank = 0;
  for (auto& st : est.stages) {
    const StageMemoryPeak& peak = peaks[static_cast<std::size_t>(st.stage)];
    sim::TagBytes bytes = peak.gpu_peak_by_tag;
    // The reserve follows the analytical rule, applied to the timeline's
    // transient bytes at the peak.
    const auto at = [&](MemTag t) { return static_cast<double>(bytes[static_cast<std::size_t>(t)]); };
    const double transient = at(MemTag::Activations) + at(MemTag::CommBuffers) + at(MemTag::Workspace);
    bytes[static_cast<std::size_t>(MemTag::AllocatorReserve)] =
        static_cast<Bytes>(std::llround(rules.allocator_reserve_fraction * transient));
    st.bytes = bytes;
    st.total = 0;
    for (Bytes b : bytes) st.total += b;
    // Host: the analytical non-activation bytes plus the replayed peak of
    // offloaded activations.
    st.host_bytes = st.host_bytes - st.host_activation_bytes + peak.host_peak;
    st.activations_stored = 0;  // the timeline does not split stored from working
    st.activations_working = 0;
    host_rank = std::max(host_rank, st.host_bytes);
  }
  est.host_bytes_per_node = host_rank * sc.cluster.node.gpus_per_node;
  est.source = "timeline";
  finish_estimate(est);
  return est;
}

}  // namespace strata::strategies
