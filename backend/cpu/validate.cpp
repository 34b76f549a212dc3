#include "backend/cpu/validate.hpp"

namespace strata::backend::cpu {

ValidateReport validate(const strategies::Scenario& sc, const ValidateOptions& opts) {
  check_validate_options(opts);
  Executor ex(sc, {.seed = opts.seed});
  return backend::validate(sc, ex, opts);
}

}  // namespace strata::backend::cpu
