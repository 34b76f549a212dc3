#include "backend/cpu/train.hpp"

#include "backend/common/out_of_memory.hpp"

namespace strata::backend::cpu {

TrainReport train(const strategies::Scenario& sc, const TrainOptions& opts,
                  const std::function<void(const TrainStep&)>& on_step) {
  check_train_options(sc, opts);
  try {
    Executor ex(sc, {.seed = opts.seed, .lr = opts.lr, .weight_decay = opts.weight_decay});
    return backend::train(sc, ex, opts, on_step);
  } catch (const OutOfMemory& e) {  // placing the model (a step's is a StepOutOfMemory already)
    throw StepOutOfMemory("run: " + out_of_memory_report(e, sc));
  }
}

}  // namespace strata::backend::cpu
