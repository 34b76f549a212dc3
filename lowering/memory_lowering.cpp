#include "lowering/memory_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/caching_allocator.hpp"
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
    const sim::PoolId pool = low.gpu_pool[static_cast<std::size_t>(s)];
    const auto& gpu = run.at(pool);
    StageMemoryPeak peak{gpu.peak, gpu.peak_by_tag, run.at(low.host_pool[static_cast<std::size_t>(s)]).peak};
    // The caching allocator replayed over the stage's allocations, with
    // what it may reserve: the GPU less what is held outside it.
    const Bytes outside = gpu.peak_by_tag[static_cast<std::size_t>(sim::MemTag::Runtime)];
    peak.allocator = sim::replay_allocator(
        low.graph, pool, gpu, {.mode = sc.plan.implementation.allocator, .limit = gpu.capacity - outside}, 3,
        [&](sim::BufferId b) -> std::span<const Bytes> {
          if (low.tensors_at.empty()) return {};
          const auto i = static_cast<std::size_t>(b.index);
          return {low.tensors.data() + low.tensors_at[i], low.tensors_at[i + 1] - low.tensors_at[i]};
        });
    peaks.push_back(peak);
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
    // transient bytes at the peak. The allocator's replay is reported beside
    // it: it sees only the tensors the program declares, not the ops'
    // temporaries, so what it reserves is not yet the peak's figure
    // (docs/memory-model.md, "The caching allocator").
    const auto at = [&](MemTag t) { return static_cast<double>(bytes[static_cast<std::size_t>(t)]); };
    const double transient = at(MemTag::Activations) + at(MemTag::CommBuffers) + at(MemTag::Workspace);
    bytes[static_cast<std::size_t>(MemTag::AllocatorReserve)] =
        static_cast<Bytes>(std::llround(rules.allocator_reserve_fraction * transient));
    st.allocator = peak.allocator;
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
