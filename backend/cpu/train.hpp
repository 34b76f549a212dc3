#pragma once
// `strata run SCENARIO --backend cpu`: the shared training loop
// (backend/common/train.hpp) on the CPU executor.
#include <functional>

#include "backend/common/train.hpp"
#include "backend/cpu/executor.hpp"

namespace strata::backend::cpu {

// The shared loop's names, as the application spells them (cpu::).
using backend::check_train_options;
using backend::render_train_json;
using backend::render_train_table;
using backend::train;
using backend::TrainOptions;
using backend::TrainRankMemory;
using backend::TrainReport;
using backend::TrainStep;

// Runs the steps on a CPU executor built with opts' seed, learning rate
// and decay. Throws InputError for an unreadable --data file or a
// byte-level file with a model vocabulary other than 256, Error for what
// the executor refuses.
TrainReport train(const strategies::Scenario& sc, const TrainOptions& opts,
                  const std::function<void(const TrainStep&)>& on_step = {});

}  // namespace strata::backend::cpu
