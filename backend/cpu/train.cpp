#include "backend/cpu/train.hpp"

namespace strata::backend::cpu {

TrainReport train(const strategies::Scenario& sc, const TrainOptions& opts,
                  const std::function<void(const TrainStep&)>& on_step) {
  check_train_options(sc, opts);
  Executor ex(sc, {.seed = opts.seed, .lr = opts.lr, .weight_decay = opts.weight_decay});
  return backend::train(sc, ex, opts, on_step);
}

}  // namespace strata::backend::cpu
