#include "backend/cpu/validate.hpp"

#include "backend/common/out_of_memory.hpp"

namespace strata::backend::cpu {

ValidateReport validate(const strategies::Scenario& sc, const ValidateOptions& opts) {
  check_validate_options(opts);
  // The prediction declares what this backend's kernels hold and do, as
  // the executor's own lowering does.
  strategies::Scenario cpu = sc;
  Executor::declare_kernels(cpu);
  try {
    Executor ex(cpu, {.seed = opts.seed});
    return backend::validate(cpu, ex, opts);
  } catch (const OutOfMemory& e) {  // placing the model (a step's is a StepOutOfMemory already)
    throw StepOutOfMemory("validate: " + out_of_memory_report(e, cpu));
  }
}

}  // namespace strata::backend::cpu
