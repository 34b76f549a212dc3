#include "backend/common/out_of_memory.hpp"

#include "lowering/step_layout.hpp"
#include "lowering/memory.hpp"
#include "lowering/step_costs.hpp"

namespace strata::backend {

OutOfMemory::OutOfMemory(Bytes requested, Bytes live, Bytes capacity, MemTag tag,
                         std::string where)
    : Error((where.empty() ? std::string() : where + ": ") + "out of memory: allocating " +
            std::to_string(requested) + " bytes (" + std::string(enum_name(tag)) + ") with " +
            std::to_string(live) + " of " + std::to_string(capacity) + " bytes live"),
      requested_(requested),
      live_(live),
      capacity_(capacity),
      tag_(tag) {}

std::string out_of_memory_report(const OutOfMemory& e, const strategies::Scenario& sc) {
  // The same layer choices as the executed graph's (optimal recompute
  // decides them under the default rules).
  const strategies::ModelStepCosts costs(sc);
  const auto est = strategies::estimate_memory(sc, {.runtime_bytes = 0, .cublas_workspace_bytes = 0},
                                               strategies::plan_layers(sc, costs));
  return std::string(e.what()) + "; the memory model predicts a peak of " +
         std::to_string(est.peak_bytes) + " bytes per device (stage " + std::to_string(est.peak_stage) +
         ") against " + std::to_string(sc.cluster.gpu.memory_bytes()) + " bytes of " +
         sc.cluster.gpu.name + " memory";
}

}  // namespace strata::backend
