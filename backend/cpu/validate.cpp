#include "backend/cpu/validate.hpp"

namespace strata::backend::cpu {

ValidateReport validate(const strategies::Scenario& sc, const ValidateOptions& opts) {
  check_validate_options(opts);
  // The prediction declares what this backend's kernels hold, as the
  // executor's own lowering does.
  strategies::Scenario cpu = sc;
  cpu.kernel_memory = strategies::KernelMemory::Cpu;
  cpu.executed = true;
  Executor ex(cpu, {.seed = opts.seed});
  return backend::validate(cpu, ex, opts);
}

}  // namespace strata::backend::cpu
